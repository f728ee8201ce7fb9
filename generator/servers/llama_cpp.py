"""llama-server: built from the pinned llama.cpp source once, cached, and run on a GGUF.

`llama_server_binary` builds llama-server once and reuses it; `LlamaServer` runs it on a GGUF.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from generator.errors import GoldensError
from generator.files import atomic_file, cache_dir, file_lock
from generator.servers.process import ManagedServer
from generator.sources import pack

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
    root = cache_dir() / "llama.cpp" / f"b{pack.LLAMA_CPP_BUILD}"
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
        with atomic_file(target) as copy:
            shutil.copy2(built, copy)
            _check_version(copy)
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


