"""Private venvs under the cache: one per engine release that cannot share the project's venv.

vLLM pins its own torch; another Transformers is the point of `transformers@V`. Each lives in
`cache_dir()/<name>/`, installed in place (venvs hard-code their path, so no build-and-rename),
trusted only once its `.complete` marker exists, written after a check inside the venv passed;
a file lock stops two processes installing the same one, and a failed or interrupted install
is wiped so the next attempt starts clean.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from generator.errors import GoldensError
from generator.files import cache_dir, file_lock

MARKER = ".complete"
PIP_INSTALL = ("-m", "pip", "install", "--no-input", "--progress-bar", "off")


def python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


Steps = Sequence[tuple[str, Sequence[str]]]  # (label, arguments to the venv's python)


def ensure(name: str, plan: Callable[[], Steps], check: str, expect: str) -> Path:
    """The python of venv `name`, installed on first use.

    `plan()` runs under the lock before anything is created and returns the install steps, run
    in order after the venv is made; it may refuse instead (a pin no index serves), so a venv
    that cannot work is never half-built. `check` is Python code run last in the venv whose
    stdout must be `expect`."""
    venv = cache_dir() / name
    if (venv / MARKER).exists():
        return python_in(venv)
    with file_lock(venv.parent / f"{venv.name}.lock"):  # a concurrent installer finishes first
        if (venv / MARKER).exists():
            return python_in(venv)
        _install(venv, plan(), check, expect)
    return python_in(venv)


def _install(venv: Path, steps: Steps, check: str, expect: str) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    python = python_in(venv)
    commands = [("create venv", [base, "-m", "venv", str(venv)])]
    commands += [(label, [str(python), *args]) for label, args in steps]
    started = time.monotonic()
    log_path = venv.parent / f"{venv.name}.install.log"
    try:
        with open(log_path, "w") as log:
            for label, argv in commands:
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
                        f"{venv.name} venv: {label} failed (exit {result.returncode}):"
                        f" {(lines or ['no output'])[-1][:300]} (log: {log_path})"
                    )
        result = subprocess.run([str(python), "-c", check], capture_output=True, text=True, timeout=600)
        if result.returncode != 0 or result.stdout.strip() != expect:
            last = (result.stderr.strip().splitlines() or [result.stdout.strip()])[-1]
            raise GoldensError(f"{venv.name} venv: the check after install failed: {last[:300]}")
        (venv / MARKER).write_text(f"{expect} in {time.monotonic() - started:.0f}s\n")
    except (OSError, subprocess.SubprocessError) as error:
        shutil.rmtree(venv, ignore_errors=True)
        raise GoldensError(f"{venv.name} venv: install failed ({error})") from None
    except BaseException:  # GoldensError, Ctrl-C: never leave a half venv behind
        shutil.rmtree(venv, ignore_errors=True)
        raise
