"""openai-harmony: gpt-oss's own renderer, the path vLLM takes for a gpt-oss model type.

vLLM never applies gpt-oss's Jinja template: a model whose config says `gpt_oss` is rendered by
`_make_request_with_harmony`, which turns the chat body into harmony messages and renders them
with openai-harmony's encoding (o200k_harmony). Comparing it with the reference (the Jinja
template through Transformers) shows where gpt-oss's two published renderers disagree.

openai-harmony is pinned (PyPI 0.0.8) and installed into its own venv under the cache; one
worker process per engine (generator/engines/harmony/worker.py, JSON lines) loads the encoding
once and renders every case. The encoding reads o200k_base.tiktoken from
TIKTOKEN_ENCODINGS_BASE: rebuilt from npm js-tiktoken and checked against harmony's sha256
(sources/tiktoken_ranks.py), since harmony cannot download it here.
"""

from __future__ import annotations

import os
from pathlib import Path

from generator.engines import EngineBase, EngineContext, Ids, Refused, Request, strict_ids
from generator.engines import parse as parse_api
from generator import heavy
from generator.errors import GoldensError
from generator.servers import venv
from generator.workers import JsonLinesWorker

PACKAGE, VERSION = "openai-harmony", "0.0.8"
WORKER = Path(__file__).resolve().with_name("worker.py")
CHECK = "import openai_harmony; from importlib.metadata import version; print(version('openai-harmony'))"
# The vocabulary harmony renders with: gpt-oss's tokenizer must be o200k_harmony's (201088
# ids; <|start|> is 200006), else the two renders' ids cannot be compared.
HARMONY_TOKENS = {"<|start|>": 200006, "<|channel|>": 200005, "<|message|>": 200008, "<|end|>": 200007}


def harmony_python() -> Path:
    """The python of the openai-harmony venv, installed on first use."""
    def plan() -> venv.Steps:
        return [(f"install {PACKAGE}=={VERSION}", venv.INSTALL, [f"{PACKAGE}=={VERSION}"])]

    return venv.ensure(f"{PACKAGE}-{VERSION}", plan, CHECK, VERSION)


class HarmonyWorker:
    """One worker process (the one JSON-lines client, generator/workers.py); `render` is
    thread-safe (one request at a time)."""

    def __init__(self, date: str):
        from generator.sources.tiktoken_ranks import o200k_base_dir

        heavy.require("starting harmony's worker")
        self.date = date
        env = {**os.environ, "TIKTOKEN_ENCODINGS_BASE": str(o200k_base_dir()), "PYTHONPATH": ""}
        self._worker = JsonLinesWorker([harmony_python(), WORKER], "harmony: the worker", env=env).start()
        self.versions = self._worker.versions

    def render(self, request: Request) -> dict:
        return self.ask({"request": request, "date": self.date})

    def ask(self, job: dict) -> dict:
        return self._worker.ask(job)

    def stop(self) -> None:
        self._worker.stop()


class HarmonyEngine(EngineBase):
    name = "harmony"

    def __init__(self, context: EngineContext):
        self._check_vocabulary(context.source.tokenizer_dir)
        self.worker = HarmonyWorker(context.date.isoformat())

    @staticmethod
    def _check_vocabulary(tokenizer_dir: Path) -> None:
        """harmony renders o200k_harmony ids: the model's tokenizer must be that vocabulary."""
        from generator.engines.minijinja.engine import load_tokenizer

        tokenizer = load_tokenizer(tokenizer_dir / "tokenizer.json")
        for token, expected in HARMONY_TOKENS.items():
            if tokenizer.token_to_id(token) != expected:
                raise GoldensError(f"harmony renders gpt-oss's o200k_harmony vocabulary; this model's "
                                   f"{token} is {tokenizer.token_to_id(token)}, not {expected}")

    def version(self) -> str:
        return self.worker.versions.get(PACKAGE, "")

    def ids(self, request: Request) -> Ids:
        answer = self.worker.render(request)
        if "refused" in answer:
            raise Refused(f"{self.name}: {answer['refused']}")
        ids = strict_ids(self.name, answer.get("ids"))
        return Ids(ids, prompt=answer.get("prompt"), pieces=answer.get("pieces"))

    def parse(self, request: Request, output, chunks) -> parse_api.Parsed:
        """openai-harmony's own parse of gpt-oss output ids (engines/harmony/worker.py `parse`):
        analysis is reasoning, final (or commentary to no one) content, a message to
        `functions.NAME` a call; finish_reason "tool_calls" with calls, "length" when the output
        does not end in <|return|> or <|call|>."""
        answer = self.worker.ask({"output": list(output), "chunks": None if chunks is None else list(chunks)})
        if "refused" in answer:
            raise Refused(f"{self.name}: {answer['refused']}")
        if chunks is None:
            return parse_api.Parsed(message=parse_api.message_of(answer["message"], answer["finish_reason"], self.name))
        return parse_api.Parsed(deltas=[[parse_api.delta_of(d, d.get("finish_reason"), self.name) for d in step]
                                        for step in answer["deltas"]])

    def close(self) -> None:
        self.worker.stop()


def open_engine(context: EngineContext) -> HarmonyEngine:
    """The registry's factory (config/engine_registry.py)."""
    return HarmonyEngine(context)
