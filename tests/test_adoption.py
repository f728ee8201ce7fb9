"""A team adopts goldens, end to end, outside this checkout: a fresh venv with the package
installed non-editable (one made by `python -m venv` and pip, one by `uv venv` with no pip in
it), `goldens init` with a tokenizer directory and a GGUF, `goldens regenerate`, `goldens check`
(transformers and minijinja: no server), `pytest --goldens`, and the written workflow against
GitHub's schema; README's block of lines run as written, pushed to a bare repository, and the gate
green in a fresh clone of it (what CI checks out).

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
import yaml
from conftest import ROOT, source_of
from test_classes import LLAMA3_TEMPLATE
from test_workflow import validate

from generator.analysis import invariants
from generator.sources.gguf import llama_cpp_vocab

pytestmark = pytest.mark.integration  # venv installs from the package index


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
    team, bare = tmp_path / "team", tmp_path / "origin.git"
    env.update({"GIT_CONFIG_COUNT": "4", "GIT_CONFIG_KEY_0": "push.autoSetupRemote", "GIT_CONFIG_VALUE_0": "true",
                "GIT_CONFIG_KEY_1": "user.name", "GIT_CONFIG_VALUE_1": "team", "GIT_CONFIG_KEY_2": "user.email",
                "GIT_CONFIG_VALUE_2": "team@example.invalid", "GIT_CONFIG_KEY_3": "init.defaultBranch",
                "GIT_CONFIG_VALUE_3": "main"})
    sh("git", "init", "-q", "--bare", bare, cwd=tmp_path, env=env)  # the team's new, empty repository
    sh("git", "clone", "-q", bare, team, cwd=tmp_path, env=env)
    # a Llama 3 tokenizer folder as a team has it: Meta's tokenizer files and Llama 3's own chat
    # template, which drops tool calls (invariant findings the README's second regenerate reviews)
    shutil.copytree(source_of("llama3").tokenizer_dir, team / "tokenizers" / "my-model")
    (team / "tokenizers" / "my-model" / "chat_template.jinja").write_text(LLAMA3_TEMPLATE, encoding="utf-8")
    (team / "models").mkdir()
    shutil.copy(llama_cpp_vocab("command-r"), team / "models" / "other.gguf")

    lines = readme_block()
    assert lines[0] == "python -m venv .venv && . .venv/bin/activate"  # made here, by pip or uv
    extras = re.fullmatch(r'pip install "goldens\[([a-z,]+)\] @ git\+https://github.com/\S+"', lines[1])[1]
    assert extras == "pytest,reference"  # installed here from the package, with README's extras
    venv = team / ".venv"  # where README's first line makes it
    if maker == "pip":
        sh(sys.executable, "-m", "venv", venv, cwd=team, env=env)
        # --no-compile: pip's bytecode of all of Transformers is not what this checks, and is most
        # of the install's minute here
        sh(venv / "bin" / "pip", "install", "--quiet", "--no-compile", f"{package}[{extras}]", cwd=team, env=env)
    else:
        uv = Path(sys.executable).parent / "uv"
        sh(uv, "venv", "--quiet", "--python", sys.executable, venv, cwd=team, env=env)
        sh(uv, "pip", "install", "--quiet", "--python", venv / "bin" / "python", *pip_configuration(),
           f"{package}[{extras}]", cwd=team, env=env)
        no_pip = subprocess.run([venv / "bin" / "python", "-c", "import pip"], capture_output=True, text=True)
        assert "No module named 'pip'" in no_pip.stderr
    env.update({"PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(venv)})  # activated
    location = sh(venv / "bin" / "python", "-c", "import generator; print(generator.__file__)", cwd=tmp_path, env=env)
    assert location.stdout.startswith(str(venv)), location.stdout  # installed, not this checkout

    done = {}
    for line in lines[2:]:  # the first of two lines of one command is the one asserted (regenerate)
        done.setdefault(line.split()[1], sh("bash", "-e", "-c", line, cwd=team, env=env))

    assert "wrote models.yaml (2 models: other, my-model)" in done["init"].stdout
    assert done["init"].stdout.splitlines()[-1].endswith(
        "(git add models.yaml models.capabilities.lock goldens .gitignore .github models/other.gguf tokenizers/my-model)")
    written = int(re.search(r"^(\d+) written, 0 unchanged, 0 removed$", done["regenerate"].stdout, re.M)[1])
    # the first regenerate says what the template drops and the review to paste, with the docs
    # page's address (the team's repository has no docs/); the second line of README wrote it
    assert "paste under models.my-model in models.yaml" in done["regenerate"].stdout, done["regenerate"].stdout
    assert invariants.docs_url() in done["regenerate"].stdout
    reviewed = yaml.safe_load((team / "models.yaml").read_text(encoding="utf-8"))["models"]["my-model"]["invariants"]
    assert any("tool call" in entry["finding"] and "dropped" in entry["finding"] for entry in reviewed), reviewed
    assert written > 20 and {p.name for p in (team / "goldens").iterdir()} == {"other", "my-model", "regenerate.index"}
    replays = 2 * written  # transformers and minijinja, every case
    refused = 2 * sum(json.loads(p.read_text())["outcome"] == "error"  # command-r's template refuses some shapes
                      for p in (team / "goldens").glob("*/*.json"))
    assert done["check"].stdout.splitlines()[-1] == (
        f"{replays} checked: {replays - refused} rendered and match, {refused} both refuse, "
        "0 known divergence, 0 drift, 0 error")
    suite = done["--goldens"].stdout
    judged = written + replays + 2 + 2 * 2  # and each model's invariants and (model, engine) groups, as check
    assert f"collected {judged} items" in suite and f" {judged} passed in " in suite, suite[-2000:]
    result = validate(team / ".github" / "workflows" / "goldens.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    status = sh("git", "status", "--porcelain", "--untracked-files=all", "--ignored=no", cwd=team, env=env).stdout
    assert status == "", status  # all committed; the venv, reports and caches ignored

    # what CI checks out: a fresh clone of what was pushed, its gate green
    clone = tmp_path / "ci"
    sh("git", "clone", "-q", bare, clone, cwd=tmp_path, env=env)
    again = sh("goldens", "regenerate", cwd=clone, env=env)
    assert again.stdout.splitlines()[-1] == f"0 written, {written} unchanged, 0 removed"
    check = sh("goldens", "check", "--junit", "out/goldens.xml", cwd=clone, env=env)
    assert check.stdout.splitlines()[-1] == (
        f"{replays} checked: {replays - refused} rendered and match, {refused} both refuse, "
        "0 known divergence, 0 drift, 0 error")
    assert (clone / "out" / "goldens.xml").is_file()


def readme_block() -> list[str]:
    """The command lines of README's "Using goldens in your repository" block, comments cut."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Using goldens in your repository"):]
    block = section[section.index("```sh\n") + len("```sh\n"):]
    block = block[:block.index("```")]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]
