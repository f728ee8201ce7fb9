"""The installed Transformers, replayed against goldens made by the pinned one.

This is the check to run after upgrading transformers, tokenizers or jinja2: the same render
path as the reference (the processor's, for a request that carries media), on whatever
versions are installed now.
"""

from __future__ import annotations

import datetime as _dt

from generator import reference
from generator.engines import EngineError, Ids, Refused, Request
from generator.sources.source import Source


class TransformersEngine:
    name = "transformers"

    def __init__(self, source: Source, date: _dt.date):
        self.source = source
        self.date = date
        self.tokenizer = reference.load_tokenizer(source.tokenizer_dir)

    def version(self) -> str:
        import transformers

        return transformers.__version__

    def ids(self, request: Request) -> Ids:
        result = reference.render_request(self.source, request, self.date)
        if result.error is not None:
            raise Refused(f"{self.name}: template refused the request: {result.error}")
        return Ids(result.ids, prompt=result.prompt, pieces=result.pieces)


class WorkerTransformersEngine:
    """Another Transformers release (`transformers@V`): the same reference render, run by a
    worker process in that release's venv (servers/transformers_venv.py)."""

    name = "transformers"

    def __init__(self, worker, source: Source, date: _dt.date):
        self.worker = worker
        self.source = source
        self.date = date

    def version(self) -> str:
        return self.worker.versions.get("transformers", "")

    def ids(self, request: Request) -> Ids:
        answer = self.worker.render(self.source.tokenizer_dir, self.source.template, request,
                                    self.date.isoformat())
        if "fatal" in answer:
            raise EngineError(f"{self.name}@{self.worker.release}: {answer['fatal']}")
        if answer["error"] is not None:
            raise Refused(f"{self.name}: template refused the request: {answer['error']}")
        return Ids(answer["ids"], prompt=answer["prompt"], pieces=answer["pieces"])
