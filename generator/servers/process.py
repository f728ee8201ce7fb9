"""Real inference servers, started, health-checked and stopped in one place for tests and CLI.

`ManagedServer` knows nothing about any engine: an argv, an environment, a health path. It
picks a free port on 127.0.0.1, runs the process in its own process group with its output in
a log file under the cache, waits for the health endpoint to answer 200, and stops the
process by its id. A server that never becomes healthy is a GoldensError carrying the end of
its log, because that is where the reason is.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from generator import heavy
from generator.errors import EngineError, GoldensError
from generator.files import cache_dir

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A port nothing listens on right now (the OS picks it; a race is retried at start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


_RUNNING: set[ManagedServer | Background] = set()


@atexit.register
def _stop_all() -> None:
    """Never leave a server (or background work) behind when the interpreter exits without
    stopping it."""
    for server in list(_RUNNING):
        server.stop()


_PREVIOUS: dict[int, object] = {}


def handle_signals() -> None:
    """SIGTERM and SIGINT stop every managed server first, then end the process through the
    normal exception path (KeyboardInterrupt for SIGINT, SystemExit(143) for SIGTERM), so every
    `finally` runs: temp files and report claims are removed. Managed servers run in their own
    session, out of reach of the terminal's Ctrl-C and of a CI runner's signal, and `atexit`
    does not run on a signal, so without this a cancelled job leaves them running. Installed
    once, from the main thread only; a handler someone else installed is called afterwards."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT):
        current = signal.getsignal(signum)
        if current is _on_signal or current == signal.SIG_IGN or current is None:
            continue
        _PREVIOUS[signum] = current
        signal.signal(signum, _on_signal)


def _on_signal(signum: int, frame) -> None:
    _stop_all()
    previous = _PREVIOUS.get(signum)
    if callable(previous):  # Python's own SIGINT handler raises KeyboardInterrupt
        previous(signum, frame)
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)  # SIG_DFL would end the process without any cleanup


class ManagedServer:
    """One server process: free port, own process group, log file, health wait, stop by PID.

    `argv` may contain the placeholders "{host}" and "{port}" (as whole arguments or inside
    one); they are filled in at start. `env` is added to the current environment.
    """

    def __init__(
        self,
        argv: Sequence[str | os.PathLike],
        *,
        name: str = "server",
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike | None = None,
        health_path: str = "/health",
        startup_timeout: float = 120.0,
        host: str = HOST,
        port: int | None = None,
        transport=None,
    ):
        self.transport = transport  # how the health page is polled (None: http.DEFAULT)
        self.argv = [os.fspath(a) for a in argv]
        self.name = name
        self.env = dict(env or {})
        self.cwd = cwd
        self.health_path = health_path if health_path.startswith("/") else "/" + health_path
        self.startup_timeout = startup_timeout
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.log_path: Path | None = None
        self.process: subprocess.Popen | None = None
        self._log_handle = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise GoldensError(f"{self.name}: not started")
        return f"http://{self.host}:{self.port}"

    def __repr__(self) -> str:
        state = f"pid {self.process.pid} at {self.url}" if self.running else "stopped"
        return f"<{type(self).__name__} {self.name} {state}>"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> ManagedServer:
        """Start and wait until healthy; a port taken between pick and bind is retried."""
        if self.running:
            return self
        attempts = 1 if self.requested_port is not None else 3
        for attempt in range(attempts):
            self._spawn(self.requested_port or free_port(self.host))
            try:
                self._wait_healthy()
                return self
            except _PortTaken:
                self.stop()
                if attempt == attempts - 1:
                    raise GoldensError(
                        f"{self.name}: could not bind a port after {attempts} tries; log "
                        f"{self.log_path}: {self._tail_one_line()}"
                    ) from None
        raise AssertionError("unreachable")

    def _spawn(self, port: int) -> None:
        heavy.require(f"starting {self.name}")
        self.port = port
        logs = cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = logs / f"{self.name}-{stamp}-{port}.log"
        argv = [a.replace("{host}", self.host).replace("{port}", str(port)) for a in self.argv]
        env = {**os.environ, **self.env}
        self._log_handle = open(self.log_path, "wb")
        self._log_handle.write(("$ " + " ".join(argv) + "\n").encode())
        self._log_handle.flush()
        try:
            self.process = subprocess.Popen(
                argv, env=env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                stdout=self._log_handle, stderr=subprocess.STDOUT, start_new_session=True,
            )
        except OSError as error:
            self._close_log()
            raise GoldensError(f"{self.name}: cannot start {argv[0]}: {error}") from None
        _RUNNING.add(self)
        handle_signals()

    def _wait_healthy(self) -> None:
        from generator import http  # the one HTTP seam; here, as every command imports this module

        transport = (self.transport or http.DEFAULT).with_timeout(2.0)
        deadline = time.monotonic() + self.startup_timeout
        health = self.url + self.health_path
        last = "no answer yet"
        while True:  # one poll every 0.1 s, each given 2 s, until healthy, exited or out of time
            code = self.process.poll()
            if code is not None:
                tail = self.log_tail(30)
                if _looks_like_port_conflict(tail):
                    raise _PortTaken()
                self.stop()
                raise GoldensError(
                    f"{self.name}: exited with code {code} before becoming healthy; "
                    f"log {self.log_path}, last lines:\n{tail}"
                )
            try:
                status, _ = transport.request("GET", health, where=self.name)
                if status == 200:
                    return
                last = f"HTTP {status}"
            except EngineError as error:
                last = str(error).removeprefix(f"{self.name}: ")
            if time.monotonic() > deadline:
                tail = self.log_tail(30)
                self.stop()
                raise GoldensError(
                    f"{self.name}: {health} not healthy after {self.startup_timeout:g}s "
                    f"({last}); log {self.log_path}, last lines:\n{tail}"
                )
            time.sleep(0.1)

    def log_tail(self, n: int = 30) -> str:
        """The last n lines of the server's log, for failure messages."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-n:])

    def _tail_one_line(self) -> str:
        return " | ".join(self.log_tail(3).splitlines())

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the process group we started (SIGTERM, then SIGKILL after `timeout`)."""
        _stop_group(self.process, timeout)
        _RUNNING.discard(self)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def __enter__(self) -> ManagedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _PortTaken(Exception):
    pass


def _group_alive(group: int) -> bool:
    """Whether a process of `group` still runs (zombies waiting for their reaper do not count).
    Linux's /proc; elsewhere, whether the group can still be signalled."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


def _group_ended(process: subprocess.Popen) -> bool:
    """Whether the leader has ended and no process of its group runs."""
    return process.poll() is not None and not _group_alive(process.pid)


def _wait_group(process: subprocess.Popen, wait: float) -> bool:
    """Wait up to `wait` seconds for the whole group to end; whether it did."""
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(0.05)
        if _group_ended(process):
            return True
        if time.monotonic() >= deadline:
            return False


def _stop_group(process: subprocess.Popen | None, timeout: float) -> None:
    """End the process group `process` leads (start_new_session: the group id is its PID),
    SIGTERM then SIGKILL after `timeout`, so nothing it started outlives it; reap it. The
    leader can end before the rest of its group (a build's cmake, make, compilers), so each
    signal waits for the whole group, not only the leader."""
    if process is None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if _group_ended(process):
            break
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        if _wait_group(process, wait):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(1)


class Background:
    """Work in a process of its own beside the run (a build, a venv install): its own process
    group, its lines on our stderr, stopped with the managed servers (on a signal, at exit, or
    by its owner) with everything it started. Nobody waits for it: whoever needs what it makes
    takes the same lock, and finds it made or makes it."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str] | None = None):
        self.argv = [str(a) for a in argv]
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None

    def start(self) -> Background:
        heavy.require(f"background work ({' '.join(self.argv[:3])[:80]})")
        self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        env=self.env, start_new_session=True)
        _RUNNING.add(self)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        _stop_group(self.process, timeout)
        _RUNNING.discard(self)


def _looks_like_port_conflict(log: str) -> bool:
    return bool(re.search(r"address already in use|couldn't bind|could not bind|bind failed", log, re.I))
