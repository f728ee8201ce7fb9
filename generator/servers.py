"""Real inference servers, started, health-checked and stopped in one place for tests and CLI.

`ManagedServer` knows nothing about any engine: an argv, an environment, a health path. It
picks a free port on 127.0.0.1, runs the process in its own process group with its output in
a log file under the cache, waits for the health endpoint to answer 200, and stops the
process by its id. A server that never becomes healthy is a GoldensError carrying the end of
its log, because that is where the reason is.

`llama_server_binary` builds llama-server from the pinned llama.cpp source once and reuses it;
`LlamaServer` runs it on a GGUF.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx

from generator import pack
from generator.errors import GoldensError

HOST = "127.0.0.1"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so two processes never build the same artifact at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def free_port(host: str = HOST) -> int:
    """A port nothing listens on right now (the OS picks it; a race is retried at start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


_RUNNING: set[ManagedServer] = set()


@atexit.register
def _stop_all() -> None:
    """Never leave a server behind when the interpreter exits without stopping it."""
    for server in list(_RUNNING):
        server.stop()


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
    ):
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
        self.port = port
        logs = pack.cache_dir() / "logs"
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

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        health = self.url + self.health_path
        last = "no answer yet"
        with httpx.Client(timeout=2.0) as client:
            while True:
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
                    response = client.get(health)
                    if response.status_code == 200:
                        return
                    last = f"HTTP {response.status_code}"
                except httpx.HTTPError as error:
                    last = type(error).__name__
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
        process = self.process
        if process is not None and process.poll() is None:
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(process.pid, sig)  # start_new_session: the group id is our PID
                except ProcessLookupError:
                    break
                try:
                    process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(1)
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


def _looks_like_port_conflict(log: str) -> bool:
    return bool(re.search(r"address already in use|couldn't bind|could not bind|bind failed", log, re.I))


# ----------------------------------------------------------------------------------------------
# llama-server
# ----------------------------------------------------------------------------------------------

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    f"-DLLAMA_BUILD_NUMBER={pack.LLAMA_CPP_BUILD}",
)


def llama_server_version(binary: Path) -> int:
    """The build number `llama-server --version` reports ("version: 0.6.0-dev (build 11434, ...)")."""
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as error:
        raise GoldensError(f"{binary}: cannot run --version: {error}") from None
    output = result.stdout + result.stderr
    match = re.search(r"\bbuild (\d+)", output) or re.search(r"version: (\d+) \(", output)
    if not match:
        raise GoldensError(f"{binary}: --version printed no build number")
    return int(match.group(1))


def llama_server_binary() -> Path:
    """llama-server of the pinned build, built from the pack's source on first use (~4 min on
    2 cores) and cached at cache_dir()/llama.cpp/b<build>/llama-server. A lock keeps two
    processes from building at once; the binary is copied in atomically and its --version
    checked, so a half-built or foreign binary is never used."""
    root = pack.cache_dir() / "llama.cpp" / f"b{pack.LLAMA_CPP_BUILD}"
    target = root / "llama-server"
    if target.exists():
        _check_version(target)
        return target
    with file_lock(root / ".build.lock"):
        if target.exists():
            _check_version(target)
            return target
        source = pack.llama_cpp_source()
        if shutil.which("cmake") is None:
            raise GoldensError("cmake is not installed (needed to build llama-server)")
        build = root / "build"
        log = root / "build.log"
        jobs = os.environ.get("GOLDENS_BUILD_JOBS", "2")
        steps = [
            ["cmake", "-S", str(source), "-B", str(build), *CMAKE_FLAGS],
            ["cmake", "--build", str(build), f"-j{jobs}", "--target", "llama-server"],
        ]
        with open(log, "ab") as handle:
            for step in steps:
                handle.write(("$ " + " ".join(step) + "\n").encode())
                handle.flush()
                code = subprocess.run(step, stdout=handle, stderr=subprocess.STDOUT).returncode
                if code != 0:
                    lines = log.read_text(errors="replace").splitlines()[-30:]
                    raise GoldensError(
                        f"building llama-server failed ({step[0]} {step[1]} exit {code}); "
                        f"log {log}, last lines:\n" + "\n".join(lines)
                    )
        built = build / "bin" / "llama-server"
        if not built.exists():
            raise GoldensError(f"building llama-server produced no {built}")
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".llama-server-")
        os.close(fd)
        try:
            shutil.copy2(built, tmp)
            _check_version(Path(tmp))
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return target


def _check_version(binary: Path) -> None:
    version = llama_server_version(binary)
    if version != pack.LLAMA_CPP_BUILD:
        raise GoldensError(
            f"{binary} reports build {version}, expected {pack.LLAMA_CPP_BUILD}; delete it to rebuild"
        )


# Fixed, so prompts that mention media never carry the random per-start marker.
MEDIA_MARKER = "<__media__>"


class LlamaServer(ManagedServer):
    """llama-server on one GGUF: 4096 context, 2 slots, Jinja templates, no web UI."""

    def __init__(
        self,
        gguf: Path,
        *,
        extra_args: Sequence[str] = (),
        ctx: int = 4096,
        parallel: int = 2,
        startup_timeout: float = 120.0,
        binary: Path | None = None,
    ):
        gguf = Path(gguf)
        if not gguf.is_file():
            raise GoldensError(f"llama-server: model file {gguf} does not exist")
        binary = binary or llama_server_binary()
        super().__init__(
            [
                binary, "-m", gguf, "--host", "{host}", "--port", "{port}",
                "-c", str(ctx), "-np", str(parallel), "--jinja", "--no-ui",
                # cpp-httplib holds a worker per keep-alive connection: enough for --jobs 8
                "--threads-http", "16", *extra_args,
            ],
            name=f"llama-server-{gguf.stem}",
            env={"LLAMA_MEDIA_MARKER": MEDIA_MARKER},
            startup_timeout=startup_timeout,
        )
        self.gguf = gguf


# ----------------------------------------------------------------------------------------------
# vLLM
# ----------------------------------------------------------------------------------------------


class VllmServer(ManagedServer):
    """vLLM's OpenAI-compatible server (CPU build, its own venv) on a local model directory.

    The chat template is always passed with --chat-template (the model dir's
    chat_template.jinja unless given): that is vLLM's first priority, ahead of any processor or
    tokenizer template, so the server renders exactly the template the goldens were made with.
    `render_only` starts vLLM's render server instead: same /tokenize rendering path, no engine
    and no weights loaded (~20 s, ~1 GB instead of ~45 s, ~3.5 GB), but no /v1/chat/completions.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        served_model_name: str | None = None,
        chat_template: Path | None = None,
        render_only: bool = False,
        max_model_len: int = 2048,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 300.0,
        python: Path | None = None,
    ):
        from generator.vllm_env import vllm_python

        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise GoldensError(f"vllm: {model_dir} is not a model directory (no config.json)")
        template = Path(chat_template) if chat_template else model_dir / "chat_template.jinja"
        if not template.is_file():
            raise GoldensError(f"vllm: chat template {template} does not exist")
        self.model_name = served_model_name or model_dir.name
        self.render_only = render_only
        module = (
            "vllm.entrypoints.launchers.render.entry" if render_only
            else "vllm.entrypoints.openai.api_server"
        )
        argv = [
            python or vllm_python(), "-m", module, "--model", model_dir,
            "--served-model-name", self.model_name, "--chat-template", template,
            "--host", "{host}", "--port", "{port}", "--max-model-len", str(max_model_len),
            "--dtype", "bfloat16",
        ]
        if not render_only:
            argv.append("--enforce-eager")  # no graph capture: faster start, same prompts
        cache_root = pack.cache_dir() / "vllm-cache-root"  # never the user's ~/.cache/vllm
        super().__init__(
            [*argv, *extra_args],
            name=f"vllm-{'render-' if render_only else ''}{model_dir.name}",
            env={
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default would reserve far more
                "VLLM_CACHE_ROOT": str(cache_root),
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
            },
            startup_timeout=startup_timeout,
        )
        self.model_dir = model_dir
        self.chat_template = template
