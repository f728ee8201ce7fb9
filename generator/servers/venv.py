"""Private venvs under the cache: one per engine release that cannot share the project's venv.

vLLM pins its own torch; another Transformers is the point of `transformers@V`. Each lives in
`cache_dir()/<name>/`, installed in place (venvs hard-code their path, so no build-and-rename),
trusted only once its `.complete` marker exists, written after a check inside the venv passed;
a file lock stops two processes installing the same one, and a failed or interrupted install
is wiped so the next attempt starts clean.

Installs go through uv when it is there (a dependency of goldens; seconds where pip takes half a
minute), else through pip in the venv. uv reads no pip.conf, so it is given the index,
extra indexes, find-links and constraints pip would use (registry.index_config). Either way
the venv is trusted only after its check ran in it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from generator import heavy, machine, progress
from generator.errors import GoldensError
from generator.files import atomic_write, cache_dir, file_lock, read_bytes
from generator.sources import registry

MARKER = ".complete"
INSTALL, UNINSTALL = "install", "uninstall"


def python_in(venv: Path) -> Path:
    return venv / "bin" / "python"


# (label, INSTALL or UNINSTALL, requirements or package names)
Steps = Sequence[tuple[str, str, Sequence[str]]]


def uv_binary() -> str | None:
    """uv's executable: GOLDENS_UV (a path, or "" to use pip), else the `uv` package's, else PATH."""
    chosen = os.environ.get("GOLDENS_UV")
    if chosen is not None:
        return chosen or None
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def commands(venv: Path, steps: Steps, uv: str | None) -> list[tuple[str, list[list[str]]]]:
    """The command lines that make `venv` and run `steps` in it, each step as the attempts to run
    in order until one succeeds: uv's with pip's configuration passed to it, or the venv module
    and pip (which reads its own configuration). A uv install first tries its cache alone
    (--offline: 0.3 s here, where asking the indexes again takes 1.4 to 2 s), then the indexes;
    so a warm cache resolves as it did when the indexes filled it."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    python = str(python_in(venv))
    if uv is not None:
        index = registry.index_config().uv_args()
        made = [("create venv", [[uv, "venv", "--quiet", "--no-config", "--python", base, str(venv)]])]
        # no --compile-bytecode (pip's default): compiling all of Transformers costs 30 s of CPU
        # here, where the import check compiles the modules a worker uses (see _install)
        verbs = {INSTALL: [uv, "pip", "install", "--no-config", "--python", python, *index],
                 UNINSTALL: [uv, "pip", "uninstall", "--no-config", "--python", python]}
    else:
        made = [("create venv", [[base, "-m", "venv", str(venv)]])]
        verbs = {INSTALL: [python, "-m", "pip", "install", "--no-input", "--progress-bar", "off"],
                 UNINSTALL: [python, "-m", "pip", "uninstall", "-y"]}
    out = list(made)
    for label, verb, args in steps:
        argv = [*verbs[verb], *args]
        cached_first = uv is not None and verb == INSTALL
        out.append((label, [[*argv[:3], "--offline", *argv[3:]], argv] if cached_first else [argv]))
    return out


def environment(uv: str | None) -> dict[str, str]:
    """The environment an installer runs in: no prompts, and uv given pip.conf's CA bundle."""
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    cert = registry.index_config().cert
    if uv is not None and cert and not env.get("SSL_CERT_FILE"):
        env["SSL_CERT_FILE"] = cert  # pip.conf's `cert`, which uv would not read
    return env


def ensure(name: str, plan: Callable[[], Steps], check: str, expect: str) -> Path:
    """The python of venv `name`, installed on first use.

    `plan()` runs under the lock before anything is created and returns the install steps, run
    in order after the venv is made; it may refuse instead (a pin no index serves), so a venv
    that cannot work is never half-built. `check` is Python code run last in the venv whose
    stdout must be `expect`."""
    venv = cache_dir() / name
    if trusted(venv, expect):
        return python_in(venv)
    heavy.require(f"installing the {venv.name} venv")  # before the lock: a light run never waits on an install
    with file_lock(venv.parent / f"{venv.name}.lock"):  # a concurrent installer finishes first
        if trusted(venv, expect):
            return python_in(venv)
        _install(venv, plan(), check, expect)  # a damaged one (its python gone) is made again
    return python_in(venv)


def trusted(venv: Path, expect: str | None = None) -> bool:
    """A venv is used only once its marker exists (its check passed) and its interpreter is
    still there: a marker left beside a removed or broken bin/python is a damaged cache. With
    `expect`, the marker must also record that check answer: a venv whose check now expects
    more (a package the plan added) is made again."""
    python = python_in(venv)
    if not ((venv / MARKER).is_file() and python.exists() and os.access(python, os.X_OK)):
        return False
    if expect is None:
        return True
    try:
        return (venv / MARKER).read_text(encoding="utf-8", errors="replace").startswith(f"{expect} in ")
    except OSError:
        return False


# After a check passes, the venv's own modules it imported (paths under site-packages) are kept per
# check text, and their bytecode under the sha256 of each module's source (`venv-bytecode/`, per
# interpreter magic number). The next venv made for the same check, before its check imports them,
# is given the stored bytecode of every module whose source is byte for byte one it has seen, with
# a header naming the new file's own mtime and size, and compiles the others on another core: so
# its check imports at the speed of a later start. A neighbouring release (a bisect) shares most
# of its dependencies' files and many of its own. Paths outside site-packages are never touched.
# These run in the venv's own interpreter (its magic number is the one that counts) and write
# through importlib's own atomic pyc write, as an import would.
_BYTECODE = """
import hashlib as _hashlib, importlib.util as _util, os as _os, sys as _sys, sysconfig as _sysconfig
from importlib._bootstrap_external import _write_atomic as _write
_root = _os.path.realpath(_sysconfig.get_paths()["purelib"]) + _os.sep
_store = _os.path.join(_sys.argv[2], _util.MAGIC_NUMBER.hex())

def _inside(_path):
    return _path.endswith(".py") and _path.startswith(_root)

def _kept(_source):
    _key = _hashlib.sha256(_source).hexdigest()
    return _os.path.join(_store, _key[:2], _key)

def _header(_path):  # a timestamp pyc's, for the file as it is now
    _info = _os.stat(_path)
    return (_util.MAGIC_NUMBER + bytes(4) + (int(_info.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (_info.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
"""
_RECORD = _BYTECODE + """
with open(_sys.argv[1], "w", encoding="utf-8") as _out:
    for _module in list(_sys.modules.values()):
        _file = _os.path.realpath(getattr(_module, "__file__", None) or "")
        if not _inside(_file):
            continue
        _out.write(_file[len(_root):] + "\\n")
        try:
            with open(_file, "rb") as _f:
                _into = _kept(_f.read())
            with open(_util.cache_from_source(_file), "rb") as _f:
                _pyc = _f.read()
            _fresh = _pyc[:16] == _header(_file)  # bytecode of exactly this source
        except OSError:
            continue
        if _fresh and not _os.path.exists(_into):
            _os.makedirs(_os.path.dirname(_into), exist_ok=True)
            _write(_into, _pyc[16:], 0o644)
"""
_WARM = _BYTECODE + """
import py_compile as _py_compile
_rest = []
for _name in open(_sys.argv[1], encoding="utf-8").read().splitlines():
    _path = _os.path.realpath(_root + _name)
    if not (_inside(_path) and _os.path.isfile(_path)):
        continue
    try:
        with open(_path, "rb") as _f:
            _from = _kept(_f.read())
        with open(_from, "rb") as _f:
            _body = _f.read()
    except OSError:
        _rest.append(_path)
        continue
    _pyc = _util.cache_from_source(_path)
    _os.makedirs(_os.path.dirname(_pyc), exist_ok=True)
    _write(_pyc, _header(_path) + _body, 0o644)
print(len(_rest), flush=True)  # placed: the check may start; the rest is compiled beside it
_sys.stdout.close()
for _path in _rest if _sys.argv[3] == "compile" else ():
    try:
        _py_compile.compile(_path, doraise=True, invalidation_mode=_py_compile.PycInvalidationMode.TIMESTAMP)
    except (_py_compile.PyCompileError, OSError):
        pass
"""


def _check(python: Path, check: str) -> subprocess.CompletedProcess:
    """Run a venv's import check, given the bytecode earlier venvs compiled for the same sources
    (see _RECORD above). Bytecode is written even where PYTHONDONTWRITEBYTECODE is set (many CI
    images set it): the check imports what the venv's users import, so each later start loads
    compiled modules (a Transformers worker: 2.2 s instead of 4.2 s here)."""
    compiling = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    imports = cache_dir() / "venv-imports" / f"{hashlib.sha256(check.encode()).hexdigest()[:16]}.txt"
    store = cache_dir() / "venv-bytecode"  # a folder per interpreter magic number in it
    helper = None
    recorded = python.parent.parent / ".imports"
    try:
        if imports.is_file():  # the stored bytecode placed first; then, on a second core, the rest
            # compiled beside the check (on one core that would only compete with it)
            rest = "compile" if machine.cores() > 1 else "leave"
            helper = subprocess.Popen([str(python), "-c", _WARM, str(imports), str(store), rest],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=compiling)
            assert helper.stdout is not None
            helper.stdout.readline()  # placed (or the helper failed: the check compiles it all)
            helper.stdout.close()
        result = subprocess.run([str(python), "-c", check + "\n" + _RECORD, str(recorded), str(store)],
                                capture_output=True, text=True, timeout=600, env=compiling)
    except BaseException:
        if helper is not None:
            helper.kill()
            helper.wait()
        raise
    if helper is not None:
        helper.wait()  # it works through the list in the check's own order: done about when the check is
    if result.returncode == 0 and recorded.is_file():
        atomic_write(imports, read_bytes(recorded), within=cache_dir())
        recorded.unlink()
    return result


def _install(venv: Path, steps: Steps, check: str, expect: str) -> None:
    heavy.require(f"installing the {venv.name} venv")
    shutil.rmtree(venv, ignore_errors=True)
    python = python_in(venv)
    uv = uv_binary()
    planned = commands(venv, steps, uv)
    env = environment(uv)
    started = time.monotonic()
    log_path = venv.parent / f"{venv.name}.install.log"
    try:
        with open(log_path, "w") as log, progress.long_work(f"{venv.name} venv", log_path) as work:
            for number, (label, attempts) in enumerate(planned, 1):
                work.update(f"step {number} of {len(planned)}: {label}")
                for argv in attempts:
                    log.write(f"$ {' '.join(argv)}\n")
                    log.flush()
                    result = subprocess.run(  # streamed to the log, so a slow step can be watched
                        argv, stdout=log, stderr=subprocess.STDOUT, timeout=1800, env=env,
                    )
                    if result.returncode == 0:
                        break
                if result.returncode != 0:
                    log.flush()
                    lines = log_path.read_text(errors="replace").strip().splitlines()
                    raise GoldensError(
                        f"{venv.name} venv: {label} failed (exit {result.returncode}):"
                        f" {(lines or ['no output'])[-1][:300]} (log: {log_path})"
                    )
            work.update("checking the import")
            result = _check(python, check)
            if result.returncode != 0 or result.stdout.strip() != expect:
                last = (result.stderr.strip().splitlines() or [result.stdout.strip()])[-1]
                raise GoldensError(f"{venv.name} venv: the check after install failed: {last[:300]}")
        how = "uv" if uv is not None else "pip"
        (venv / MARKER).write_text(f"{expect} in {time.monotonic() - started:.0f}s ({how})\n")
    except (OSError, subprocess.SubprocessError) as error:
        shutil.rmtree(venv, ignore_errors=True)
        raise GoldensError(f"{venv.name} venv: install failed ({error})") from None
    except BaseException:  # GoldensError, Ctrl-C: never leave a half venv behind
        shutil.rmtree(venv, ignore_errors=True)
        raise
