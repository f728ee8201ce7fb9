"""transformers.js: the chat template rendered by JavaScript, as in browsers, Node and the Hub.

transformers.js's `apply_chat_template` renders with npm `@huggingface/jinja` (a Jinja written in
TypeScript) and tokenizes with `@huggingface/tokenizers` (a JavaScript port of HF tokenizers).
Both are pinned by version and sha256 and fetched into the cache like the pack (zero
dependencies each); one Node worker per model (generator/engines/transformers_js/worker.mjs,
JSON lines) loads the tokenizer and compiles the template once. A difference from the reference
is the JavaScript Jinja's, the JavaScript tokenizer's, or transformers.js's own call (no
continue_final_message; only the named special tokens a config spells out).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from generator.engines import EngineBase, EngineContext, Ids, Refused, Request, strict_ids
from generator import heavy
from generator.errors import GoldensError
from generator.workers import JsonLinesWorker
from generator.sources import pack

JINJA = pack.Artifact("npm", "@huggingface/jinja", "0.5.13",
                      "f191fb8332ae4d5cdf73682ced93ccc58c25021cf338ae0795f7652985c2c0e1")
TOKENIZERS = pack.Artifact("npm", "@huggingface/tokenizers", "0.2.0",
                           "2800014c83b8186b2e4210c20672f1fb65a12cef85d7e95e0f2003e022611b4a")
WORKER = Path(__file__).resolve().with_name("worker.mjs")


class NodeWorker:
    """One Node process for one model (the one JSON-lines client, generator/workers.py); `render`
    is thread-safe (one request at a time). Its first job opens the model, at every start."""

    def __init__(self, tokenizer_dir: Path, template: str, date: str):
        node = shutil.which("node")
        if node is None:
            raise GoldensError("transformers-js: node is not installed (it runs transformers.js's render)")
        heavy.require("starting transformers-js' Node worker")
        packages = [pack.fetch(artifact) / "package" for artifact in (JINJA, TOKENIZERS)]
        self._worker = JsonLinesWorker(
            [node, WORKER, *packages], "transformers-js: the Node worker", greeting=False,
            setup={"tokenizer_dir": str(tokenizer_dir), "template": template, "date": date}).start()
        self.versions = self._worker.ready

    def render(self, request: Request) -> dict:
        return self._worker.ask({"request": request})

    def stop(self) -> None:
        self._worker.stop()


class TransformersJsEngine(EngineBase):
    name = "transformers-js"

    def __init__(self, context: EngineContext):
        self.worker = NodeWorker(context.source.tokenizer_dir, context.source.template, context.date.isoformat())

    def version(self) -> str:
        versions = self.worker.versions
        return f"@huggingface/jinja {versions.get('jinja')}, @huggingface/tokenizers {versions.get('tokenizers')}"

    def ids(self, request: Request) -> Ids:
        answer = self.worker.render(request)
        if "refused" in answer:
            raise Refused(f"{self.name}: template refused the request: {answer['refused']}")
        return Ids(strict_ids(self.name, answer.get("ids")), prompt=answer.get("prompt"),
                   pieces=answer.get("pieces"))

    def close(self) -> None:
        self.worker.stop()


def open_engine(context: EngineContext) -> TransformersJsEngine:
    """The registry's factory (config/engine_registry.py)."""
    return TransformersJsEngine(context)
