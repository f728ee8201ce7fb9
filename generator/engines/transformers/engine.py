"""The installed Transformers, replayed against goldens made by the pinned one.

This is the check to run after upgrading transformers, tokenizers or jinja2: the same render
path as the reference (the processor's, for a request that carries media), on whatever
versions are installed now.
"""

from __future__ import annotations

import datetime as _dt

from generator import reference
from generator.engines import EngineBase, EngineContext, EngineError, Ids, Refused, Request
from generator.sources.source import Source


class TransformersEngine(EngineBase):
    """The reference's render on the installed releases (generator/reference.py renders on the
    main thread, where the render deadline reaches every part of it, and sends a render asked
    from any other thread to a worker process: generator/render_worker.py)."""

    name = "transformers"
    renders_here = True  # replay asks it from the main thread: no worker process needed there

    def __init__(self, source: Source, date: _dt.date, parsers: dict[str, str] | None = None,
                 end: tuple[str, ...] = (), until: float | None = None):
        self.source = source
        self.date = date
        self.until = until  # the run's deadline (EngineContext.until), for every render here
        self.tokenizer = reference.load_tokenizer(source.tokenizer_dir)
        self._parse = (parsers or {}).get("response"), end
        self._parser = None

    def parse(self, request: Request, output, chunks):
        """What `transformers serve` sends back for these output ids (engines/transformers/parse.py)."""
        if self._parser is None:
            from generator.engines.transformers.parse import TransformersParser

            self._parser = TransformersParser(self.source, self.date, *self._parse, until=self.until)
        return self._parser.parse(request, output, chunks)

    def version(self) -> str:
        import transformers

        return transformers.__version__

    def ids(self, request: Request) -> Ids:
        result = reference.render_request(self.source, request, self.date, self.until)
        if result.error is not None:
            raise Refused(f"{self.name}: template refused the request: {result.error}")
        return Ids(result.ids, prompt=result.prompt, pieces=result.pieces)


class WorkerTransformersEngine(EngineBase):
    """Another Transformers release (`transformers@V`): the same reference render, run by a
    worker process in that release's venv (engines/transformers/venv.py)."""

    name = "transformers"

    def __init__(self, worker, source: Source, date: _dt.date, until: float | None = None):
        self.worker = worker
        self.source = source
        self.date = date
        self.until = until  # the run's deadline (EngineContext.until): the worker is killed past it

    def version(self) -> str:
        return self.worker.versions.get("transformers", "")

    def ids(self, request: Request) -> Ids:
        from generator.config.request import carries_media

        # a request with media goes to the model's processor, as the reference renders it
        # (reference.render_request); without one the release cannot be asked about it
        processor = None
        if carries_media(request):
            if self.source.processor_dir is None:
                raise Refused(f"{self.name}: {self.source.model} has no `processor` settings in models.yaml "
                              f"to expand media with")
            processor = self.source.processor_dir
        answer = self.worker.render(self.source.tokenizer_dir, self.source.template, request,
                                    self.date.isoformat(), processor, self.until)
        if "fatal" in answer:
            raise EngineError(f"{self.name}@{self.worker.release}: {answer['fatal']}")
        if answer["error"] is not None:
            raise Refused(f"{self.name}: template refused the request: {answer['error']}")
        return Ids(answer["ids"], prompt=answer["prompt"], pieces=answer["pieces"])


# ------------------------------------------------------------------ registry entries (config/engine_registry.py)

def installed() -> str:
    from importlib.metadata import version

    return version("transformers")


def open_engine(context: EngineContext) -> TransformersEngine | WorkerTransformersEngine:
    """The installed Transformers, or another release through a worker in its own venv."""
    if context.version is None or context.version == installed():
        return TransformersEngine(context.source, context.date, context.parsers, context.end, context.until)
    return WorkerTransformersEngine(context.managed(), context.source, context.date, context.until)


def make_worker(model, source, version: str, on_start):
    """A worker process running Transformers `version` (one per release, whatever the model)."""
    from generator.engines.transformers.venv import TransformersWorker

    on_start(f"starting a Transformers {version} worker (its venv is installed once, about a minute)")
    return TransformersWorker(version)


class _Releases:
    """Transformers releases from PyPI: the installed one, or a venv per release."""

    def default(self) -> str:
        return installed()

    def require(self, version: str) -> None:
        from generator.engines.transformers.venv import require_available

        if version != installed():
            require_available(version)

    def published(self) -> list[str]:
        from packaging.version import Version

        from generator.sources import registry

        return [v for v in registry.versions("transformers") if not Version(v).is_prerelease]

    def require_published(self, version: str) -> None:
        from generator.sources import registry

        registry.require_published("transformers", version)

    def order(self, version: str):
        from packaging.version import Version

        return Version(version)

    def ready(self, version: str, jobs: int | None = None) -> tuple[float, str]:
        import time

        from generator.engines.transformers.venv import cached as venv_cached
        from generator.engines.transformers.venv import transformers_python

        if version == installed():
            return 0.0, "cached"
        cached = venv_cached(version)
        started = time.monotonic()
        transformers_python(version)
        return (0.0, "cached") if cached else (time.monotonic() - started, "installed (venv)")

    def cached(self, version: str) -> bool:
        from generator.engines.transformers.venv import cached

        return version == installed() or cached(version)

    def label(self, version: str) -> str:
        return version

    def release_url(self, version: str) -> str:
        return f"https://github.com/huggingface/transformers/releases/tag/v{version}"


RELEASES = _Releases()
