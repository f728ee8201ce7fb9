"""Engines from other packages: docs/engines.md's example engine, pip-installed into a fresh venv, is
listed by `goldens engines` with its package and replayed by `goldens check`; broken and
clashing registrations are reported in one line, never picked silently.

The venv reaches goldens' dependencies through a .pth file naming this interpreter's
site-packages, and this worktree's `generator` through PYTHONPATH. The package is a wheel built
here from docs/engines.md's pyproject.toml (its name, version and entry points) and module, because a
build backend would have to be downloaded (setuptools 65 needs `wheel` for bdist_wheel). The
venv is made as goldens makes its own, with uv when it is there (then it has no pip), and the
wheel installed with no index, so nothing is downloaded.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest import GOLDENS, ROOT, refusal_count, render_count, tier

from generator.config import engine_registry
from generator.goldens import golden_file
from generator.servers.venv import uv_binary

EXTRA = '''
from generator.engines import Ids


class Misnamed:
    name = "something-else"

    def __init__(self, context):
        pass

    def ids(self, request):
        return Ids([])


def failing(context):
    raise RuntimeError("no licence server at " + str(context.url))
'''


def readme_example(name: str) -> str:
    """The code block docs/engines.md shows right after `<!-- example engine: NAME -->`."""
    text = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    match = re.search(rf"<!-- example engine: {re.escape(name)} -->\n```\w+\n(.*?)\n```", text, re.DOTALL)
    assert match, f"docs/engines.md has no example block for {name}"
    return match.group(1) + "\n"


def build_wheel(directory: Path, pyproject: dict, modules: dict[str, str]) -> Path:
    """A pure-Python wheel (PEP 427) of `modules` with the pyproject's name, version and entry points."""
    project = pyproject["project"]
    name, version = project["name"], project["version"]
    stem = f"{name.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    groups = project.get("entry-points", {})
    files = {**modules,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: goldens-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/entry_points.txt": "".join(
                 f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
                 for group, entries in groups.items())}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    wheel = directory / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # a venv made with uv and a wheel installed into it
def venv(tmp_path_factory) -> Path:
    """A fresh venv with docs/engines.md's example package (plus test-only broken entries) installed."""
    root = tmp_path_factory.mktemp("plugin")
    pyproject = tomllib.loads(readme_example("pyproject.toml"))
    pyproject["project"]["entry-points"]["goldens.engines"].update({
        "broken": "my_engines.missing:Nope",
        "vllm": "my_engines.engine:InHouseRenderer",
        "misnamed": "my_engines.extra:Misnamed",
        "failing": "my_engines.extra:failing",
        "Bad_Name": "my_engines.extra:Misnamed",
    })
    wheel = build_wheel(root, pyproject, {
        "my_engines/__init__.py": "",
        "my_engines/engine.py": readme_example("my_engines/engine.py"),
        "my_engines/extra.py": EXTRA,
    })
    env = root / "venv"
    uv = uv_binary()  # as goldens makes its own venvs: uv (no pip in the venv), else venv + pip
    base = getattr(sys, "_base_executable", None) or sys.executable
    made = [uv, "venv", "--quiet", "--python", base, str(env)] if uv else [sys.executable, "-m", "venv", str(env)]
    subprocess.run(made, check=True, capture_output=True)
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "goldens-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installer = [uv, "pip", "install", "--python", str(python)] if uv else [str(python), "-m", "pip", "install"]
    install = subprocess.run([*installer, "--quiet", "--no-index", "--no-deps", str(wheel)],
                             capture_output=True, text=True, check=False)
    assert install.returncode == 0, install.stderr
    return python


def goldens(python: Path, *args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "1"}
    return subprocess.run([str(python), "-m", "generator.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300, check=False)


@pytest.mark.integration
def test_engines_lists_the_plugin_with_its_package(venv):
    result = goldens(venv, "engines")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    built_in = len(engine_registry.BUILT_IN)
    assert [line.split()[0] for line in lines[:built_in]] == [info.name for info in engine_registry.BUILT_IN]
    by_name = {line.split()[0]: line for line in lines[built_in:]}
    assert re.fullmatch(r"in-house +my-engines 0\.1\.0 +my_engines\.engine:InHouseRenderer", by_name["in-house"])
    assert by_name["vllm"].endswith("my_engines.engine:InHouseRenderer [not usable: the name is a built-in engine's]")
    assert by_name["Bad_Name"].endswith("[not usable: an engine name is lowercase letters, digits, '.', '_' and '-']")
    assert "not usable" not in by_name["broken"]  # its import fails only when it is used


def moved_as_sent(model: str) -> set[str]:
    """The cases of `model` the reference rendered after normalizing the body, where the body
    as sent is refused by the template or renders another prompt (recorded in each golden)."""
    moved = set()
    for path in sorted((GOLDENS / model).glob("*.json")):
        golden = golden_file.read(path) if "." not in path.stem else None
        as_sent = (golden.extra.get("normalization") or {}).get("as_sent") if golden and golden.outcome == "ok" else None
        if as_sent and (as_sent["outcome"] == "error" or not as_sent["same_prompt"]):
            moved.add(f"{model}/{path.stem}")
    return moved


@pytest.mark.integration
def test_the_plugin_is_replayed_like_any_engine(venv, tmp_path):
    result = goldens(venv, "check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS,
                     "--engine", "in-house", "--model", "qwen3", "--junit", tmp_path / "out.xml",
                     "--report", tmp_path / "out.md")
    # a client that renders for itself hands the template the bodies as sent: the template
    # refuses the client-shaped bodies the reference normalizes (null content, text parts)
    assert result.returncode == 1, (result.stdout, result.stderr)
    drifts = [line for line in result.stdout.splitlines() if line.startswith("DRIFT ")]
    cases, refused = render_count("qwen3"), refusal_count("qwen3")
    assert result.stdout.splitlines()[-1] == (f"{cases} checked: {cases - refused - len(drifts)} rendered and match, "
                                              f"{refused} both refuse, 0 known divergence, {len(drifts)} drift, 0 error")
    # exactly the bodies the reference normalized (client bodies and dialect cases) and whose
    # template, handed the body as sent, refuses it or writes another prompt (the golden's
    # normalization.as_sent says which) drift
    drifted = {line.split()[1] for line in drifts}
    assert drifted == moved_as_sent("qwen3"), (drifts, sorted(moved_as_sent("qwen3")))
    assert {"qwen3/client-null-content", "qwen3/client-text-parts"} <= drifted
    assert 'name="goldens.in-house"' in (tmp_path / "out.xml").read_text()


@pytest.mark.integration
def test_models_yaml_may_list_a_plugin_engine(venv, tmp_path):
    (tmp_path / "models.yaml").write_text(
        "models:\n  qwen3:\n    tokenizer: {pack: \"npm:qwen3\"}\n"
        "    shapes: [plain, tools, prefill]\n    engines: [in-house]\n")
    result = goldens(venv, "check", "--config", tmp_path / "models.yaml", "--goldens", GOLDENS)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.splitlines()[-1] == "3 checked: 3 rendered and match, 0 both refuse, 0 known divergence, 0 drift, 0 error"
    # the same file where the plugin is not installed: one line naming the engine
    here = subprocess.run([sys.executable, "-m", "generator.cli", "check", "--config", str(tmp_path / "models.yaml")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert here.returncode == 2
    assert here.stderr.splitlines() == [
        ("goldens: error: models.yaml: models.qwen3.engines[0]: unknown engine 'in-house' (known: "
         + ", ".join(entry.name for entry in engine_registry.BUILT_IN) + ")")]


@pytest.mark.integration
@pytest.mark.parametrize("engine, message", [
    ("broken", ("goldens: error: engine 'broken' (my_engines.missing:Nope from my-engines 0.1.0): cannot load: "
               "ModuleNotFoundError: No module named 'my_engines.missing'")),
    ("misnamed", ("goldens: error: engine 'misnamed' (my_engines.extra:Misnamed from my-engines 0.1.0): returned "
                 "Misnamed named 'something-else', not an Engine named 'misnamed'")),
    ("failing", ("goldens: error: engine 'failing' (my_engines.extra:failing from my-engines 0.1.0): failed to "
                "start: RuntimeError: no licence server at None")),
    ("Bad_Name", ("goldens: error: engine 'Bad_Name' from my-engines 0.1.0 cannot be used: an engine name is "
                 "lowercase letters, digits, '.', '_' and '-'")),
])
def test_a_broken_plugin_is_one_line_exit_2(venv, tmp_path, engine, message):
    result = goldens(venv, "check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS,
                     "--engine", engine, "--model", "qwen3", "--report", tmp_path / "out.md")
    assert result.returncode == 2, (result.stdout, result.stderr)
    if engine == "Bad_Name":  # refused by name before the run: no report
        assert result.stderr.splitlines() == [message]
        assert not (tmp_path / "out.md").exists()
        return
    # an engine that cannot open costs its own cases (errors in every report), not the run
    fault = message.removeprefix("goldens: error: ")
    assert result.stderr.splitlines() == [
        f"goldens: error: [{engine}] {engine} unavailable for qwen3: {fault} ({render_count('qwen3')} cases, from qwen3/plain)"]
    assert f"{render_count('qwen3')} error" in (tmp_path / "out.md").read_text()


def readme_block(marker: str) -> str:
    """The code block docs/engines.md shows right after `<!-- MARKER -->`."""
    text = (ROOT / "docs" / "engines.md").read_text(encoding="utf-8")
    match = re.search(rf"<!-- {re.escape(marker)} -->\n```\w+\n(.*?)\n```", text, re.DOTALL)
    assert match, f"docs/engines.md has no block after <!-- {marker} -->"
    return match.group(1) + "\n"


@pytest.mark.slow
def test_a_built_in_engine_is_one_folder_and_one_registry_entry(tmp_path):
    """docs/engines.md's toy engine added exactly as the page says (its folder, its line in BUILT_IN) to a
    copy of generator/, then listed and replayed like every built-in."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "generator", copy / "generator", ignore=shutil.ignore_patterns("__pycache__"))
    folder = copy / "generator" / "engines" / "toy"
    folder.mkdir()
    (folder / "__init__.py").write_text("", encoding="utf-8")
    (folder / "engine.py").write_text(
        readme_block("example built-in engine: generator/engines/toy/engine.py"), encoding="utf-8")
    registry = copy / "generator" / "config" / "engine_registry.py"
    text = registry.read_text(encoding="utf-8")
    assert text.count("BUILT_IN = (\n") == 1
    registry.write_text(text.replace("BUILT_IN = (\n", "BUILT_IN = (\n" + readme_block("example built-in entry")),
                        encoding="utf-8")
    (tmp_path / "models.yaml").write_text(
        "models:\n  qwen3:\n    tokenizer: {pack: \"npm:qwen3\"}\n"
        "    shapes: [plain, tools, prefill]\n    engines: [toy]\n")
    env = {**os.environ, "PYTHONPATH": str(copy)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "generator.cli", *map(str, args)], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=300, check=False)

    listed = run("engines")
    assert listed.returncode == 0, listed.stderr
    assert re.match(r"toy +built-in +the reference's render", listed.stdout.splitlines()[0])
    result = run("check", "--config", tmp_path / "models.yaml", "--goldens", GOLDENS, "--report", tmp_path / "out.md")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert result.stdout.splitlines()[-1] == "3 checked: 3 rendered and match, 0 both refuse, 0 known divergence, 0 drift, 0 error"
