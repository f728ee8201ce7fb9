"""transformers.js: the chat template rendered by JavaScript, as in browsers, Node and the Hub.

transformers.js's `apply_chat_template` renders with npm `@huggingface/jinja` (a Jinja written in
TypeScript) and tokenizes with `@huggingface/tokenizers` (a JavaScript port of HF tokenizers).
Both are pinned by version and sha256 and fetched into the cache like the pack (zero
dependencies each); one Node worker per model (generator/servers/transformers_js_worker.mjs,
JSON lines) loads the tokenizer and compiles the template once. A difference from the reference
is the JavaScript Jinja's, the JavaScript tokenizer's, or transformers.js's own call (no
continue_final_message; only the named special tokens a config spells out).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

from generator.engines import EngineBase, EngineContext, EngineError, Ids, Refused, Request, strict_ids
from generator import heavy
from generator.errors import GoldensError
from generator.files import cache_dir
from generator.sources import pack

JINJA = pack.Artifact("npm", "@huggingface/jinja", "0.5.13",
                      "f191fb8332ae4d5cdf73682ced93ccc58c25021cf338ae0795f7652985c2c0e1")
TOKENIZERS = pack.Artifact("npm", "@huggingface/tokenizers", "0.2.0",
                           "2800014c83b8186b2e4210c20672f1fb65a12cef85d7e95e0f2003e022611b4a")
WORKER = Path(__file__).resolve().parents[1] / "servers" / "transformers_js_worker.mjs"


class NodeWorker:
    """One Node process for one model; `render` is thread-safe (one request at a time)."""

    def __init__(self, tokenizer_dir: Path, template: str, date: str):
        node = shutil.which("node")
        if node is None:
            raise GoldensError("transformers-js: node is not installed (it runs transformers.js's render)")
        heavy.require("starting transformers-js' Node worker")
        packages = [pack.fetch(artifact) / "package" for artifact in (JINJA, TOKENIZERS)]
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            [node, str(WORKER), *map(str, packages)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, encoding="utf-8", cwd=str(cache_dir()),
        )
        self._send({"tokenizer_dir": str(tokenizer_dir), "template": template, "date": date})
        self.versions = self._read()

    def render(self, request: Request) -> dict:
        with self._lock:
            self._send({"request": request})
            return self._read()

    def _send(self, job: dict) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(job, ensure_ascii=False) + "\n")
            self._process.stdin.flush()
        except OSError as error:
            raise EngineError(f"transformers-js: the Node worker died ({error})") from None

    def _read(self) -> dict:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            code = self._process.wait()
            error = (self._process.stderr.read() if self._process.stderr else "").strip().splitlines()
            shown = next((text for text in error if "Error" in text), error[-1] if error else "no output")
            raise EngineError(f"transformers-js: the Node worker exited (code {code}): {shown}")
        return json.loads(line)

    def stop(self) -> None:
        from generator.servers.process import close_worker

        close_worker(self._process)


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
