"""A render in a worker process, for a render asked anywhere but a process's main thread.

The render deadline is a signal, and Python runs a signal's handler on the main thread only
(generator/budget.py). A render asked from another thread (a replay pool's, a release search's,
an HTTP stand-in's) is sent here instead: a worker process renders it on *its* main thread,
under the same deadline, and this side waits for the answer no longer than that deadline (or
what is left of the run's) plus HARD_GRACE, then kills the worker, whatever it is doing (one C
call included), and raises what the deadline raises. The next render starts a fresh worker.

The worker is `python -m generator.engines.transformers.worker` (JSON lines, one request at a
time): this interpreter's for `here()`, shared by the whole process, or another release's venv
(engines/transformers/venv.py's TransformersWorker).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from pathlib import Path
from typing import Any

from generator import budget
from generator.errors import EngineError, GoldensError
from generator.workers import JsonLinesWorker, WorkerError, WorkerTimeout

PACKAGE = Path(__file__).resolve().parent  # the generator package itself
MODULE = "generator.engines.transformers.worker"


class RenderWorker:
    """One worker process (the one JSON-lines client, generator/workers.py); `ask` is
    thread-safe (one request at a time)."""

    def __init__(self, python: Path, label: str, import_root: Path | None = None):
        self.python = Path(python)
        self.label = label
        self.import_root = import_root or PACKAGE.parent
        env = {**os.environ, "PYTHONPATH": str(self.import_root), "TRANSFORMERS_VERBOSITY": "error",
               "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self._worker = JsonLinesWorker([self.python, "-m", MODULE], label, env=env)
        self._lock = threading.Lock()

    @property
    def versions(self) -> dict[str, str]:
        return self._worker.versions

    def start(self) -> RenderWorker:
        try:
            self._worker.start()
        except WorkerError as error:
            raise GoldensError(str(error)) from None
        return self

    def ask(self, job: dict[str, Any], until: float | None = None) -> dict:
        """The worker's answer to one job, within the render deadline (or the run's, `until`) plus
        HARD_GRACE; past that the worker is killed and the deadline's error raised. An answer
        the worker could not give for this machine's limits ({"unjudged"}) raises the same."""
        with self._lock:
            if not self._worker.running:
                self.start()
            seconds, expired, message = budget.limit(until)
            try:
                answer = self._worker.ask(job, seconds + budget.HARD_GRACE)
            except WorkerTimeout:  # past its deadline and the grace: ended, whatever it was doing
                raise expired(message) from None
            except WorkerError as error:
                raise GoldensError(str(error)) from None
        if "unjudged" in answer:  # the worker's own deadline or memory: this machine's limits
            kind = {"RenderDeadline": budget.RenderDeadline, "OutOfMemory": budget.OutOfMemory}
            raise kind.get(answer.get("kind"), EngineError)(answer["unjudged"])
        return answer

    def stop(self) -> None:
        """End the worker: at once when a render is in flight (Ctrl-C, SIGTERM, a pool closing
        mid-run), else by closing its input."""
        self._worker.stop()


_here: RenderWorker | None = None
_here_lock = threading.Lock()


def here() -> RenderWorker:
    """The process's worker on this interpreter's own Transformers (no venv, nothing installed),
    started on first use and stopped at exit."""
    global _here
    with _here_lock:
        if _here is None:
            _here = RenderWorker(Path(sys.executable), "the reference")
            atexit.register(_here.stop)
        return _here
