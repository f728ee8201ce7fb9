"""goldens-parse, llama.cpp's parse harness (llama_parse/goldens-parse.cpp), as a worker process.

One process per model GGUF and build, started with the flags the managed llama-server gets; it
answers one JSON line per case. Every wait is bounded: a harness that does not answer in time is
killed and its case is an EngineError naming its log, so a parser that loops never hangs a run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from generator import heavy
from generator.errors import EngineError
from generator.workers import JsonLinesWorker

START_SECONDS = 60.0  # loading a vocabulary (gpt-oss: 201k tokens) from a tiny GGUF
CASE_SECONDS = 60.0  # one case: a stream re-parses the whole text after every id


class ParseHarness:
    """A started goldens-parse (the one JSON-lines client, generator/workers.py); `ask` is
    thread-safe (one case at a time). Its first line says its build (`ready`); one that has
    exited is not started again here (the engine starts a new harness)."""

    def __init__(self, binary: Path, args: Sequence[str], env: Mapping[str, str] | None = None,
                 name: str = "llama-server parse harness", case_seconds: float = CASE_SECONDS):
        self.name = name
        self.case_seconds = case_seconds
        heavy.require(f"starting the {name}")
        self._worker = JsonLinesWorker([binary, *args], name, env={**os.environ, **(env or {})},
                                       start_seconds=START_SECONDS).start()
        self.ready = self._worker.versions  # {"build": N, "build_info": "b11434-<commit>"}
        self.log_path = self._worker.log_path

    @property
    def running(self) -> bool:
        return self._worker.running

    def ask(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """One case's answer (the harness's JSON line for `job`), within case_seconds."""
        if not self._worker.running:
            raise EngineError(f"{self.name}: the harness has exited; log {self.log_path}")
        return self._worker.ask(job, self.case_seconds)

    def stop(self) -> None:
        self._worker.stop()
