"""A team adopts goldens, end to end, outside this checkout: a fresh venv with the package
installed non-editable (one made by `python -m venv` and pip, one by `uv venv` with no pip in
it), `goldens init` with a tokenizer directory and a GGUF, `goldens regenerate`, `goldens check`
(transformers and minijinja: no server), `pytest --goldens`, and the written workflow against
GitHub's schema.

uv does not read pip's configuration, so the index, extra indexes, find-links and constraints
pip is configured with here are passed to it explicitly, as a team's CI would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, source_of
from test_workflow import validate

from generator.sources.gguf import llama_cpp_vocab


def sh(*args, cwd: Path, env: dict[str, str], timeout: float = 1200) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (args, result.returncode, result.stdout[-3000:], result.stderr[-3000:])
    return result


def pip_configuration() -> list[str]:
    """pip's own index settings here (pip.conf and PIP_*), as uv options."""
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                            check=True).stdout
    settings: dict[str, list[str]] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        settings.setdefault(key.split(".", 1)[-1], []).extend(value.strip("'\"").split())
    for name in ("index-url", "extra-index-url", "find-links", "constraint"):
        env = os.environ.get(f"PIP_{name.upper().replace('-', '_')}")
        if env:
            settings[name] = env.split()
    options = ["--index-strategy", "unsafe-best-match"]  # pip's way: every index is as good as another
    for name, flag in (("index-url", "--index-url"), ("extra-index-url", "--extra-index-url"),
                       ("find-links", "--find-links"), ("constraint", "--constraint")):
        for value in dict.fromkeys(settings.get(name, [])):
            options += [flag, value]
    return options


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """The package's source as a release would ship it: no tests, no goldens, no checkout."""
    src = tmp_path_factory.mktemp("adoption") / "goldens-src"
    shutil.copytree(ROOT / "generator", src / "generator", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    return src


@pytest.mark.parametrize("maker", ["pip", "uv"])
def test_a_team_adopts_goldens_from_pip_install_to_a_green_gate(maker, package, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    venv = tmp_path / "venv"
    if maker == "pip":
        sh(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=env)
        # --no-compile: pip's bytecode of all of Transformers is not what this checks, and is most
        # of the install's minute here
        sh(venv / "bin" / "pip", "install", "--quiet", "--no-compile", f"{package}[pytest]", cwd=tmp_path, env=env)
    else:
        uv = Path(sys.executable).parent / "uv"
        sh(uv, "venv", "--quiet", "--python", sys.executable, venv, cwd=tmp_path, env=env)
        sh(uv, "pip", "install", "--quiet", "--python", venv / "bin" / "python", *pip_configuration(),
           f"{package}[pytest]", cwd=tmp_path, env=env)
        no_pip = subprocess.run([venv / "bin" / "python", "-c", "import pip"], capture_output=True, text=True)
        assert "No module named 'pip'" in no_pip.stderr
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    location = sh(venv / "bin" / "python", "-c", "import generator; print(generator.__file__)", cwd=tmp_path, env=env)
    assert location.stdout.startswith(str(venv)), location.stdout  # installed, not this checkout

    team = tmp_path / "team"
    shutil.copytree(source_of("qwen3").tokenizer_dir, team / "tokenizers" / "qwen3")
    (team / "models").mkdir()
    shutil.copy(llama_cpp_vocab("command-r"), team / "models" / "command-r.gguf")
    sh("git", "init", "-q", cwd=team, env=env)

    init = sh("goldens", "init", "--dir", "tokenizers/qwen3", "--gguf", "models/command-r.gguf", cwd=team, env=env)
    assert "wrote models.yaml (2 models: command-r, qwen3)" in init.stdout
    first = sh("goldens", "regenerate", cwd=team, env=env)
    written = int(re.search(r"^(\d+) written, 0 unchanged, 0 removed$", first.stdout, re.M)[1])
    assert written > 20 and {p.name for p in (team / "goldens").iterdir()} == {"command-r", "qwen3", "regenerate.index"}
    again = sh("goldens", "regenerate", "--force", cwd=team, env=env)
    assert again.stdout.splitlines()[-1] == f"0 written, {written} unchanged, 0 removed"

    check = sh("goldens", "check", "--junit", "out/goldens.xml", cwd=team, env=env)
    replays = 2 * written  # transformers and minijinja, every case
    refused = 2 * sum(json.loads(p.read_text())["outcome"] == "error"  # command-r's template refuses some shapes
                      for p in (team / "goldens").glob("*/*.json"))
    assert check.stdout.splitlines()[-1] == (f"{replays} checked: {replays - refused} rendered and match, "
                                             f"{refused} both refuse, 0 known divergence, 0 drift, 0 error")
    assert (team / "out" / "goldens.xml").is_file()

    suite = sh(venv / "bin" / "python", "-m", "pytest", "--goldens", "-q", "-p", "no:cacheprovider", cwd=team, env=env)
    assert re.search(rf"^{written + replays} passed in ", suite.stdout, re.M), suite.stdout[-2000:]

    result = validate(team / ".github" / "workflows" / "goldens.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    status = sh("git", "status", "--porcelain", "--untracked-files=all", cwd=team, env=env).stdout
    assert "out/" not in status and ".goldens-cache" not in status  # the reports are ignored
    assert "?? models.yaml" in status and "?? goldens/qwen3/plain.json" in status
