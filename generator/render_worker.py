"""A render in a worker process, for a render asked anywhere but a process's main thread.

The render deadline is a signal, and Python runs a signal's handler on the main thread only
(generator/budget.py). A render asked from another thread (a replay pool's, a release search's,
an HTTP stand-in's) is sent here instead: a worker process renders it on *its* main thread,
under the same deadline, and this side waits for the answer no longer than that deadline (or
what is left of the run's) plus HARD_GRACE, then kills the worker, whatever it is doing (one C
call included), and raises what the deadline raises. The next render starts a fresh worker.

The worker is `python -m generator.servers.transformers_worker` (JSON lines, one request at a
time): this interpreter's for `here()`, shared by the whole process, or another release's venv
(servers/transformers_venv.py's TransformersWorker).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from generator import budget
from generator.errors import EngineError, GoldensError

PACKAGE = Path(__file__).resolve().parent  # the generator package itself
MODULE = "generator.servers.transformers_worker"


class RenderWorker:
    """One worker process; `ask` is thread-safe (one request at a time)."""

    def __init__(self, python: Path, label: str, import_root: Path | None = None):
        self.python = Path(python)
        self.label = label
        self.import_root = import_root or PACKAGE.parent
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._busy = False
        self.versions: dict[str, str] = {}

    def start(self) -> RenderWorker:
        env = {**os.environ, "PYTHONPATH": str(self.import_root), "TRANSFORMERS_VERBOSITY": "error",
               "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        from generator.files import cache_dir

        self._process = subprocess.Popen(
            [str(self.python), "-m", MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, encoding="utf-8", env=env, cwd=str(cache_dir()),
        )
        self.versions = self._read() or {}
        return self

    def ask(self, job: dict[str, Any]) -> dict:
        """The worker's answer to one job, within the render deadline (or the run's) plus
        HARD_GRACE; past that the worker is killed and the deadline's error raised. An answer
        the worker could not give for this machine's limits ({"unjudged"}) raises the same."""
        with self._lock:
            if self._process is None:
                self.start()
            assert self._process is not None and self._process.stdin is not None
            seconds, expired, message = budget.limit()
            try:
                self._process.stdin.write(json.dumps(job, ensure_ascii=False) + "\n")
                self._process.stdin.flush()
            except OSError as error:
                self._kill()
                raise GoldensError(f"{self.label}: the render worker died ({error})") from None
            self._busy = True
            try:
                answer = self._read(seconds + budget.HARD_GRACE)
            finally:
                self._busy = False
            if answer is None:  # past its deadline and the grace: ended, whatever it was doing
                self._kill()
                raise expired(message)
        if "unjudged" in answer:  # the worker's own deadline or memory: this machine's limits
            kind = {"RenderDeadline": budget.RenderDeadline, "OutOfMemory": budget.OutOfMemory}
            raise kind.get(answer.get("kind"), EngineError)(answer["unjudged"])
        return answer

    def _read(self, timeout: float | None = None) -> dict | None:
        """The worker's next line as data; None when `timeout` seconds pass without one."""
        process = self._process
        assert process is not None and process.stdout is not None
        if timeout is not None and not select.select([process.stdout], [], [], timeout)[0]:
            return None
        line = process.stdout.readline()
        if not line:
            code = process.poll()
            self._kill()
            raise GoldensError(f"{self.label}: the render worker exited (code {code})")
        return json.loads(line)

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.kill()
            process.wait()

    def stop(self) -> None:
        """End the worker: at once when a render is in flight (Ctrl-C, SIGTERM, a pool closing
        mid-run), else by closing its input."""
        if self._busy:
            self._kill()
            return
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
