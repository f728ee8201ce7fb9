"""SGLang's output side: the message its server makes of a model's output ids, without the server.

SGLang's server cannot run here (its kernels need CUDA), but everything between the output ids
and the client's message is Python: the DetokenizerManager's incremental detokenization, then
serving_chat's reasoning parser and tool-call parser. The release's own parsers
(`sglang/srt/function_call/`, `sglang/srt/parser/reasoning_parser.py`) run in a light venv
(`sglang==V --no-deps` plus the few packages they import, each at the release's own pin: no torch);
what serving_chat and the detokenizer do around them is copied into the worker
(generator/engines/sglang/worker.py, JSON lines, one process per model and release), each step
naming the SGLang source it follows.

A parse-only engine (renders=False): its prompt side is never asked. The five prompt ids the
detokenizer keeps as context before the output (schedule_batch.py
INIT_INCREMENTAL_DETOKENIZATION_OFFSET) are the reference's render of the request, standing in
for SGLang's own render of it. Parser names come from models.yaml `parsers: {sglang: {tool,
reasoning}}`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from generator import heavy
from generator.engines import EngineBase, EngineContext, EngineError, Refused, Request, strict_ids
from generator.engines import parse as parse_api
from generator.errors import GoldensError
from generator.files import cache_dir, file_lock
from generator.servers import venv
from generator.workers import JsonLinesWorker

PACKAGE = "sglang"
DEFAULT = "0.5.23"
FIRST = "0.5.10"  # the oldest release whose parsers this worker has been run against
WORKER = Path(__file__).resolve().with_name("worker.py")
# What the parser path imports (the server's other dependencies are never installed): SGLang's
# protocol models (pydantic, openai's types), its parsers' JSON readers (partial_json_parser,
# orjson, msgspec, regex), sglang/utils.py's top-level imports (numpy, pybase64, requests), the
# template detection (jinja2) and the tokenizer (transformers, tokenizers).
LIGHT = ("pydantic", "partial_json_parser", "orjson", "msgspec", "openai", "regex", "numpy",
         "pybase64", "requests", "jinja2", "transformers", "tokenizers")
TIMEOUT = 120.0  # seconds for one answer: a parser that loops is an error, never a hang
# Opening a model loads its tokenizer as SGLang does: Transformers 5 reads tokenizer.json once
# per attempt, and a generic TokenizersBackend is loaded three times (get_tokenizer's retries):
# 13 s for Qwen3 and 79 s for Gemma 4's 262k vocabulary on this 2-core machine, imports included.
OPEN_TIMEOUT = 600.0
# Where the model's stop ids are more than its tokenizer's eos (SGLang stops on the model
# config's eos_token_id too; the packs here carry no generation_config.json): gpt-oss's lists
# <|return|> and <|call|> (generation_config.json eos_token_id [200002, 199999, 200012]), and
# Gemma 4's [1, 106, 50] adds <turn|>, which ends every model turn, and <|tool_response>, which
# ends a turn that made calls (model_config.py _get_hf_eos_token_id unions config.json's and
# generation_config.json's eos ids). Keyed by the model's SGLang tool parser, which names the
# output format.
TURN_ENDS = {"gpt-oss": ("<|return|>", "<|call|>", "<|endoftext|>"), "gemma4": ("<turn|>", "<|tool_response>")}
# serving_chat's is_gpt_oss / is_gemma4 read the model config's model_type; the parser names it
MODEL_TYPES = {"gpt-oss": "gpt_oss", "gemma4": "gemma4"}


# ------------------------------------------------------------------ the venv


def venv_name(version: str) -> str:
    return f"sglang-{version}"


CHECK_TEMPLATE = """import sys
sys.path.insert(0, {folder!r})
import worker
worker.install_stubs()
import sglang.srt.function_call.function_call_parser, sglang.srt.parser.reasoning_parser
import sglang.srt.function_call.json_array_parser, transformers, tokenizers
from importlib.metadata import version
print(version("sglang"))"""


def check_code() -> str:
    return CHECK_TEMPLATE.format(folder=str(WORKER.parent))


def cached(version: str) -> bool:
    return venv.trusted(cache_dir() / venv_name(version), version)


def sglang_python(version: str) -> Path:
    """The python of the venv holding sglang==`version` and its parsers' dependencies, installed
    on first use."""
    def plan() -> venv.Steps:
        wheel = _wheel(version)
        return [(f"install {PACKAGE}=={version} (no dependencies)", venv.INSTALL, ["--no-deps", str(wheel)]),
                ("install the parsers' dependencies", venv.INSTALL, light_requirements(_metadata(wheel)))]

    return venv.ensure(venv_name(version), plan, check_code(), version)


def _wheel(version: str) -> Path:
    """The release's wheel for this interpreter, downloaded once into the cache (sha256 checked
    against the index's); its metadata names the pins the light dependencies take."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    from generator.sources import registry

    folder = cache_dir() / "sglang-wheels"
    supported = list(sys_tags())
    rank = {tag: i for i, tag in enumerate(supported)}
    candidates = []
    for file in registry.files(PACKAGE):
        if file.version != version or not file.filename.endswith(".whl"):
            continue
        _, _, _, tags = parse_wheel_filename(file.filename)
        best = min((rank[tag] for tag in tags if tag in rank), default=None)
        if best is not None:
            candidates.append((best, file))
    if not candidates:
        raise GoldensError(f"sglang {version}: no wheel on {registry.simple_index()} for this Python")
    file = min(candidates, key=lambda pair: pair[0])[1]
    path = folder / file.filename
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / f"{file.filename}.lock"):
        if not path.is_file():
            partial = folder / f".{file.filename}.{os.getpid()}"
            partial.mkdir(exist_ok=True)
            try:
                downloaded = registry.download(file, partial)
                os.replace(downloaded, path)
            finally:
                for leftover in partial.iterdir():
                    leftover.unlink()
                partial.rmdir()
    return path


def _metadata(wheel: Path) -> str:
    """The wheel's METADATA text (its Requires-Dist lines)."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise GoldensError(f"{wheel.name}: no single .dist-info/METADATA")
        return archive.read(names[0]).decode("utf-8", "replace")


def light_requirements(metadata: str) -> list[str]:
    """Each LIGHT package as the release requires it (its own specifier, markers evaluated for
    this interpreter), or unpinned where the release does not name it."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    wanted = {canonicalize_name(name): name for name in LIGHT}
    pinned: dict[str, str] = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            requirement = Requirement(line.partition(":")[2].strip())
        except InvalidRequirement:
            continue
        name = canonicalize_name(requirement.name)
        if name not in wanted or (requirement.marker is not None
                                  and not requirement.marker.evaluate({"extra": ""})):
            continue
        pinned[name] = f"{wanted[name]}{requirement.specifier}"
    return [pinned.get(name, original) for name, original in wanted.items()]


# ------------------------------------------------------------------ the worker


class SglangWorker:
    """One worker process: one SGLang release, one model's parsers (the one JSON-lines client,
    generator/workers.py). `call` is thread-safe (one job at a time) and bounded: a worker that
    does not answer within TIMEOUT is killed, and the next call starts another."""

    def __init__(self, version: str, model: str, tokenizer_dir: Path, template: str,
                 tool: str | None, reasoning: str | None):
        self.release = version
        self.model_name = model
        self.setup = {"op": "model", "tokenizer_dir": str(tokenizer_dir), "template": template,
                      "tool": tool, "reasoning": reasoning,
                      "model_type": MODEL_TYPES.get(tool or reasoning or "", ""),
                      "stop": list(TURN_ENDS.get(tool or reasoning or "", ()))}
        self._lock = threading.Lock()
        self._worker: JsonLinesWorker | None = None
        self.versions: dict[str, str] = {}
        self.facts: dict[str, Any] = {}

    def start(self) -> SglangWorker:
        with self._lock:
            self._start()
        return self

    def _start(self) -> None:
        heavy.require(f"starting SGLang {self.release}'s parser worker")
        python = sglang_python(self.release)
        env = {**os.environ, "PYTHONPATH": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
        self._worker = JsonLinesWorker([python, WORKER], f"sglang@{self.release}", env=env,
                                       start_seconds=OPEN_TIMEOUT, setup=self.setup).start()
        self.versions, answer = self._worker.versions, self._worker.ready
        if "model" not in answer:
            self._stop()
            raise GoldensError(f"sglang@{self.release}: cannot open {self.model_name}: "
                               f"{answer.get('error') or answer}")
        self.facts = answer["model"]

    def call(self, job: dict) -> dict:
        with self._lock:
            if self._worker is None or not self._worker.running:
                self._start()
            assert self._worker is not None
            return self._worker.ask(job, TIMEOUT)

    def _stop(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def stop(self) -> None:
        with self._lock:
            self._stop()


def make_worker(model, source, version: str, on_start) -> SglangWorker:
    """The registry's Server factory: one worker per (release, model), not yet started."""
    tool, reasoning = model.parser(PACKAGE, "tool"), model.parser(PACKAGE, "reasoning")
    if tool is None and reasoning is None:
        raise GoldensError(f"sglang: models.yaml names no SGLang parser for {model.name} "
                           "(parsers: {sglang: {tool: NAME, reasoning: NAME}})")
    if not cached(version):
        on_start(f"installing SGLang {version}'s parsers into their own venv (once, about half a minute)")
    return SglangWorker(version, model.name, source.tokenizer_dir, source.template, tool, reasoning)


# ------------------------------------------------------------------ the engine


class SglangEngine(EngineBase):
    """parse(request, output, chunks) through SGLang's output path (generator/engines/parse.py)."""

    name = "sglang"

    def __init__(self, context: EngineContext):
        self.context = context
        self.worker: SglangWorker = context.managed()
        self._tails: dict[str, list[int]] = {}
        self._tails_lock = threading.Lock()

    def version(self) -> str:
        return self.worker.versions.get(PACKAGE, "")

    def ids(self, request: Request):
        raise EngineError("sglang: a parse-only engine (its server cannot run here); it renders no prompt")

    def parse(self, request: Request, output: Sequence[int], chunks: Sequence[int] | None) -> parse_api.Parsed:
        output = strict_ids(self.name, list(output))
        if chunks is not None:
            parse_api.split(output, chunks)  # the plan must cover the output
        answer = self.worker.call({"op": "parse", "request": request, "output": output,
                                   "chunks": None if chunks is None else list(chunks),
                                   "prompt_tail": self._prompt_tail(request)})
        where = f"sglang@{self.worker.release}"
        if "refused" in answer:
            raise Refused(f"{self.name}: {answer['refused']}")
        if "error" in answer:
            raise EngineError(f"{where}: {answer['error']}")
        notes = [f"skip_special_tokens={answer.get('skip_special_tokens')}"] if "skip_special_tokens" in answer else []
        if chunks is None:
            return parse_api.Parsed(message=parse_api.message_of(answer.get("message"), answer.get("finish_reason"),
                                                                 where), notes=notes)
        deltas = []
        for number, sent in enumerate(answer.get("chunks") or []):
            step = []
            for item in sent:
                delta = parse_api.delta_of(item.get("delta"), item.get("finish_reason"), f"{where} chunk {number}")
                if delta:  # the role chunk (content "") carries nothing a client assembles
                    step.append(delta)
            deltas.append(step)
        if len(deltas) != len(chunks):
            raise EngineError(f"{where}: {len(deltas)} answers for {len(chunks)} chunks")
        return parse_api.Parsed(deltas=deltas, notes=notes)

    def _prompt_tail(self, request: Request) -> list[int]:
        """The last prompt ids the detokenizer decodes as context (the reference's render)."""
        from generator import reference
        from generator.canonical import dumps

        key = dumps(request)
        with self._tails_lock:
            if key in self._tails:
                return self._tails[key]
        rendered = reference.render_request(self.context.source, request, self.context.date, self.context.until)
        if rendered.error is not None:
            raise Refused(f"{self.name}: the reference cannot render the request the output answers: "
                          f"{rendered.error}")
        tail = list(rendered.ids[-5:])
        with self._tails_lock:
            self._tails[key] = tail
        return tail


def open_engine(context: EngineContext) -> SglangEngine:
    """The registry's factory (config/engine_registry.py)."""
    return SglangEngine(context)


# ------------------------------------------------------------------ releases


class _Releases:
    """SGLang releases from PyPI, each in its own light venv."""

    def default(self) -> str:
        return DEFAULT

    def require(self, version: str) -> None:
        from packaging.version import InvalidVersion, Version

        try:
            too_old = Version(version) < Version(FIRST)
        except InvalidVersion:
            raise GoldensError(f"sglang@{version}: not a version") from None
        if too_old:
            raise GoldensError(f"sglang@{version}: the parser worker runs SGLang {FIRST} and later")
        if not cached(version):
            from generator.sources import registry

            registry.require_published(PACKAGE, version, label="sglang")

    def published(self) -> list[str]:
        from packaging.version import Version

        from generator.sources import registry

        return [v for v in registry.versions(PACKAGE)
                if not Version(v).is_prerelease and Version(v) >= Version(FIRST)]

    def require_published(self, version: str) -> None:
        from generator.sources import registry

        self.require(version)
        registry.require_published(PACKAGE, version, label="sglang")

    def order(self, version: str):
        from packaging.version import Version

        return Version(version)

    def ready(self, version: str, jobs: int | None = None) -> tuple[float, str]:
        import time

        if cached(version):
            return 0.0, "cached"
        started = time.monotonic()
        sglang_python(version)
        return time.monotonic() - started, "installed (venv)"

    def cached(self, version: str) -> bool:
        return cached(version)

    def label(self, version: str) -> str:
        return version

    def release_url(self, version: str) -> str:
        return f"https://github.com/sgl-project/sglang/releases/tag/v{version}"


RELEASES = _Releases()
