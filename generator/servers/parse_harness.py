"""goldens-parse, llama.cpp's parse harness (llama_parse/goldens-parse.cpp), as a worker process.

One process per model GGUF and build, started with the flags the managed llama-server gets; it
answers one JSON line per case. Every wait is bounded: a harness that does not answer in time is
killed and its case is an EngineError naming its log, so a parser that loops never hangs a run.
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

from generator import heavy
from generator.errors import EngineError
from generator.files import cache_dir
from generator.servers.process import close_worker

START_SECONDS = 60.0  # loading a vocabulary (gpt-oss: 201k tokens) from a tiny GGUF
CASE_SECONDS = 60.0  # one case: a stream re-parses the whole text after every id


class ParseHarness:
    """A started goldens-parse; `ask` is thread-safe (one case at a time)."""

    def __init__(self, binary: Path, args: Sequence[str], env: Mapping[str, str] | None = None,
                 name: str = "llama-server parse harness", case_seconds: float = CASE_SECONDS):
        self.name = name
        self.case_seconds = case_seconds
        self._lock = threading.Lock()
        heavy.require(f"starting the {name}")
        logs = cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.log_path = logs / f"goldens-parse-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{id(self):x}.log"
        argv = [str(binary), *map(str, args)]
        with open(self.log_path, "wb") as log:  # the child keeps its own copy of the descriptor
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            try:
                self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                                 env={**os.environ, **(env or {})}, cwd=str(cache_dir()))
            except OSError as error:
                raise EngineError(f"{name}: cannot start {binary}: {error}") from None
        self._buffer = b""
        self.ready = self._read(START_SECONDS)  # {"build": N, "build_info": "b11434-<commit>"}

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def ask(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """One case's answer (the harness's JSON line for `job`)."""
        with self._lock:
            if self._process.poll() is not None:
                raise EngineError(f"{self.name}: the harness has exited (code {self._process.returncode}); "
                                  f"log {self.log_path}")
            assert self._process.stdin is not None
            try:
                self._process.stdin.write((json.dumps(job, ensure_ascii=False) + "\n").encode())
                self._process.stdin.flush()
            except OSError as error:
                raise EngineError(f"{self.name}: the harness died ({error}); log {self.log_path}") from None
            return self._read(self.case_seconds)

    def _read(self, seconds: float) -> dict[str, Any]:
        """The next line, within `seconds`; the harness is killed when it takes longer."""
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        deadline = time.monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self._process.kill()
                    self._process.wait()
                    raise EngineError(f"{self.name}: no answer within {seconds:.0f} s (killed); log {self.log_path}")
                data = os.read(fd, 1 << 20)
                if not data:
                    code = self._process.wait()
                    raise EngineError(f"{self.name}: the harness exited (code {code}): {self._last_log_line()}")
                self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            raise EngineError(f"{self.name}: answered a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise EngineError(f"{self.name}: answered {type(reply).__name__}, not a JSON object")
        return reply

    def _last_log_line(self) -> str:
        lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        return f"{lines[-1].strip() if lines else 'no output'} (log {self.log_path})"

    def stop(self) -> None:
        close_worker(self._process)
