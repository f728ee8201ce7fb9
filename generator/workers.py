"""The one client of a JSON-lines worker: a child process that answers each JSON line on its
stdin with one JSON line on its stdout, one request at a time.

Five engines talk to such a child (the Transformers render worker of a release's venv, the
transformers.js Node worker, harmony's worker, SGLang's parser worker and llama.cpp's parse
harness); each once had its own copy of starting it, writing a job, reading a line within a
deadline and ending it, and they had drifted apart (a pipe nobody drained, a worker that could
hang a read forever). Here it is once: the child's stderr goes to a log file (its last line is
what an error shows), a read waits no longer than its `seconds` (the child is then killed), a
child that exits or dies is an error naming it, and `stop` asks it to finish (stdin closed)
before killing it. Callers turn these errors into their own (RenderWorker: the render deadline).
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from generator.errors import EngineError


class WorkerError(EngineError):
    """The worker could not answer: it exited, died, or answered something that is not a line of JSON."""


class WorkerTimeout(WorkerError):
    """No answer within the read's seconds: the worker was killed."""


def close_worker(process: subprocess.Popen) -> None:
    """End a worker that reads requests on stdin: close its stdin (its signal to finish), give
    it 10 s, then kill it; its pipes are closed either way."""
    if process.poll() is None:
        if process.stdin is not None:
            try:
                process.stdin.close()
            except OSError:
                pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


class JsonLinesWorker:
    """One child process; `ask` is thread-safe (one request at a time). Started on first use
    (or by `start`), again after it ended; `greeting` says whether it writes a first line
    (its versions) before any request, kept in `versions`; `setup`, a job sent at every start
    (a model to open), its answer kept in `ready`."""

    def __init__(self, argv: Sequence[str | os.PathLike], label: str, *, env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike | None = None, greeting: bool = True, start_seconds: float | None = None,
                 setup: Mapping[str, Any] | None = None):
        """`cwd`: the cache folder unless given (a worker writes nothing beside the caller's files)."""
        self.argv = [os.fspath(a) for a in argv]
        self.label = label
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.greeting = greeting
        self.start_seconds = start_seconds
        self.setup = setup
        self.versions: dict[str, Any] = {}
        self.ready: dict[str, Any] = {}
        self.log_path: Path | None = None
        self._process: subprocess.Popen | None = None
        self._buffer = b""
        self._lock = threading.RLock()
        self._busy = False

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> JsonLinesWorker:
        from generator.files import cache_dir

        with self._lock:
            logs = cache_dir() / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            name = "".join(c if c.isalnum() or c in "-." else "-" for c in self.label)
            self.log_path = logs / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{id(self):x}.log"
            with open(self.log_path, "wb") as log:  # the child keeps its own copy of the descriptor
                log.write(("$ " + " ".join(self.argv) + "\n").encode())
                log.flush()
                try:
                    self._process = subprocess.Popen(
                        self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                        env=self.env, cwd=os.fspath(self.cwd if self.cwd is not None else cache_dir()))
                except OSError as error:
                    self._process = None
                    raise WorkerError(f"{self.label}: cannot start {self.argv[0]}: {error}") from None
            self._buffer = b""
            self.versions = self._read(self.start_seconds) if self.greeting else {}
            self.ready = self._exchange(self.setup, self.start_seconds) if self.setup is not None else {}
            return self

    def ask(self, job: Mapping[str, Any], seconds: float | None = None) -> dict[str, Any]:
        """The worker's answer to one job, within `seconds` (None: no bound)."""
        with self._lock:
            if not self.running:
                self.start()
            self._busy = True
            try:
                return self._exchange(job, seconds)
            finally:
                self._busy = False

    def _exchange(self, job: Mapping[str, Any], seconds: float | None) -> dict[str, Any]:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write((json.dumps(job, ensure_ascii=False) + "\n").encode("utf-8"))
            self._process.stdin.flush()
        except OSError as error:
            self.kill()
            raise WorkerError(f"{self.label}: the worker died ({error}); {self._last_log_line()}") from None
        return self._read(seconds)

    def _read(self, seconds: float | None) -> dict[str, Any]:
        """The next line as a JSON object, within `seconds`; the worker is killed when it takes longer."""
        process = self._process
        assert process is not None and process.stdout is not None
        fd = process.stdout.fileno()
        deadline = None if seconds is None else time.monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = None if deadline is None else deadline - time.monotonic()
                try:
                    if left is not None and (left <= 0 or not selector.select(left)):
                        self.kill()
                        raise WorkerTimeout(f"{self.label}: no answer within {seconds:.0f} s (killed)")
                    data = os.read(fd, 1 << 20)
                except (OSError, ValueError):  # stopped from another thread while it was read
                    raise WorkerError(f"{self.label}: the worker was stopped") from None
                if not data:
                    code = process.wait()
                    self.kill()
                    raise WorkerError(f"{self.label}: the worker exited (code {code}): {self._last_log_line()}")
                self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            raise WorkerError(f"{self.label}: answered a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise WorkerError(f"{self.label}: answered {type(reply).__name__}, not a JSON object")
        return reply

    def _last_log_line(self) -> str:
        """What the worker last wrote on stderr (an uncaught error's last line), and where its log is."""
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines()[1:] if line.strip()]
        except (OSError, AttributeError):
            lines = []
        return f"{lines[-1].strip() if lines else 'no output'} (log {self.log_path})"

    def kill(self) -> None:
        """End the worker at once, whatever it is doing (one C call included)."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.kill()
            close_worker(process)

    def stop(self) -> None:
        """End the worker: at once when a request is in flight (Ctrl-C, SIGTERM, a pool closing
        mid-run), else by closing its input."""
        if self._busy:
            self.kill()
            return
        with self._lock:
            process, self._process = self._process, None
            if process is not None:
                close_worker(process)
