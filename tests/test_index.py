"""The regenerate index: a run with nothing changed loads no tokenizer, and one changed input
renders again exactly the models it touches.

Loads are observed, not timed: every AutoTokenizer.from_pretrained call of a run is recorded (the
real loader still runs). The matrix is two models, `alpha` and `beta`, each with its own copy of
Phi-3.5's tokenizer directory and its own template file, rendered in this process (workers=1) so
every load is seen; worker processes are checked to write the same bytes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import source_of

from generator import installed, reference
from generator.cli import main
from generator.config import models
from generator.goldens import index
from generator.goldens import regenerate as regen

ROOT = Path(__file__).resolve().parents[1]

MATRIX = """\
date: {date}
models:
  alpha:
    tokenizer: {{dir: alpha-tok}}
    template: {{file: alpha.jinja}}
    shapes: [plain, tools]
    kwargs: {kwargs}
{alpha_extra}  beta:
    tokenizer: {{dir: beta-tok}}
    template: {{file: beta.jinja}}
    shapes: [{beta_shapes}]
{beta_extra}"""
DEFAULTS = {"date": "2026-01-15", "kwargs": "{}", "beta_shapes": "plain, no-system", "alpha_extra": "",
            "beta_extra": ""}


class Matrix:
    """A two-model matrix in a temporary directory, and the tokenizer loads of each run."""

    def __init__(self, root: Path, monkeypatch):
        self.root, self.out, self.config = root, root / "goldens", root / "models.yaml"
        phi = source_of("phi3.5")
        for name in ("alpha", "beta"):
            shutil.copytree(phi.tokenizer_dir, root / f"{name}-tok")
            (root / f"{name}.jinja").write_text(phi.template, encoding="utf-8")
        self.values = dict(DEFAULTS)
        self.write()
        self.loads: list[str] = []
        from transformers import AutoTokenizer

        real = AutoTokenizer.from_pretrained

        def recorded(directory, *args, **kwargs):
            self.loads.append(Path(directory).name.removesuffix("-tok"))
            return real(directory, *args, **kwargs)

        monkeypatch.setattr(AutoTokenizer, "from_pretrained", recorded)

    def write(self, **values: str) -> None:
        self.values.update(values)
        self.config.write_text(MATRIX.format(**self.values), encoding="utf-8")

    def run(self, force: bool = False, prune: bool = False) -> tuple[tuple[int, int, int], list[str]]:
        """(written, unchanged, removed) and the models whose tokenizer was loaded."""
        reference.load_tokenizer.cache_clear()
        self.loads.clear()
        summary = regen.regenerate(models.load(self.config), self.out, force=force, workers=1, prune=prune)
        return (summary.written, summary.unchanged, summary.removed), sorted(set(self.loads))

    def state(self) -> dict[str, tuple[bytes, int]]:
        return {str(p.relative_to(self.out)): (p.read_bytes(), p.stat().st_mtime_ns)
                for p in sorted(self.out.rglob("*")) if p.is_file()}


@pytest.fixture
def matrix(tmp_path, monkeypatch) -> Matrix:
    built = Matrix(tmp_path, monkeypatch)
    assert built.run() == ((4, 0, 0), ["alpha", "beta"])
    return built


@pytest.mark.slow
def test_a_run_with_nothing_changed_loads_no_tokenizer(matrix):
    before = matrix.state()
    assert "regenerate.index" in before
    assert matrix.run() == ((0, 4, 0), [])
    assert matrix.state() == before  # not a byte rewritten, not even the index


@pytest.mark.slow
def test_a_run_with_nothing_changed_imports_no_transformers(matrix):
    """The command a user types, in a fresh process: with the index holding, the template check
    and the sources resolve without Transformers (0.6 s of import), so a no-change run stays
    fast; and a template that does not compile is still refused once its text changes."""
    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "generator.cli", "regenerate",
             "--config", str(matrix.config), "--out", str(matrix.out)],
            capture_output=True, text=True, cwd=matrix.root, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    result = run()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "0 written, 4 unchanged" in result.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "jinja2" not in imported and not any(name.split(".")[0] == "transformers" for name in imported)
    (matrix.root / "alpha.jinja").write_text("{% if %}", encoding="utf-8")
    refused = run()
    assert refused.returncode == 2 and "does not compile" in refused.stderr


def _upgrade(monkeypatch, root: Path, name: str, version: str) -> None:
    """A distribution's metadata as pip installs it, first on sys.path: what importlib.metadata
    (and so the index and the provenance) reports after an upgrade of `name`. A process reads
    installed versions once (generator.installed), so the run after an upgrade is a new process:
    here, a fresh memo."""
    site = root / "site"
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(installed, "version", functools.cache(installed.version.__wrapped__))


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


# name -> (change, models rendered again, goldens written by that run)
CHANGES = {
    "template-byte": (lambda m: (m.root / "alpha.jinja").write_text(
        (m.root / "alpha.jinja").read_text(encoding="utf-8") + "x", encoding="utf-8"), ["alpha"], 2),
    "tokenizer-file": (lambda m: _edit_json(m.root / "alpha-tok" / "tokenizer_config.json",
                                            model_max_length=4096), ["alpha"], 2),
    "tokenizer-extra-file": (lambda m: (m.root / "beta-tok" / "added_tokens.json").write_text("{}\n"),
                             ["beta"], 0),
    "shape-added": (lambda m: m.write(beta_shapes="plain, no-system, tools"), ["beta"], 1),
    "shape-removed": (lambda m: m.write(beta_shapes="plain"), ["beta"], 0),
    "kwargs": (lambda m: m.write(kwargs="{date_string: 15 Jan 2026}"), ["alpha"], 2),
    "variant": (lambda m: m.write(beta_extra="    variants: {terse: {style: terse}}\n"), ["beta"], 2),
    "prefix-tail": (lambda m: m.write(alpha_extra="    prefix_tails: {default: {tokens: 2, reason: by design}}\n"),
                    ["alpha"], 0),
    "date": (lambda m: m.write(date="2026-02-01"), ["alpha", "beta"], 4),
}


@pytest.mark.parametrize("name", CHANGES)
@pytest.mark.slow
def test_one_changed_input_renders_exactly_its_models(matrix, name):
    change, expected, written = CHANGES[name]
    change(matrix)
    (done, unchanged, removed), loaded = matrix.run()
    assert loaded == expected
    assert done == written
    before = matrix.state()
    assert matrix.run()[1] == []  # the index now records the change
    assert matrix.state() == before


@pytest.mark.slow
def test_a_library_upgrade_renders_every_model(matrix, monkeypatch):
    _upgrade(monkeypatch, matrix.root, "jinja2", "9.9.9")
    (written, _, _), loaded = matrix.run()
    assert loaded == ["alpha", "beta"] and written == 4  # provenance records the new jinja2
    data = json.loads((matrix.out / "alpha" / "plain.json").read_text(encoding="utf-8"))
    assert data["provenance"]["jinja2"] == "9.9.9"


@pytest.mark.slow
def test_a_renderer_dependency_not_in_provenance_still_counts(matrix, monkeypatch):
    _upgrade(monkeypatch, matrix.root, "markupsafe", "0.0.1")
    assert matrix.run() == ((0, 4, 0), ["alpha", "beta"])


@pytest.mark.parametrize("damage", ["edited", "deleted", "extra-line"])
@pytest.mark.slow
def test_a_golden_that_is_not_what_was_written_renders_its_model_again(matrix, damage):
    golden = matrix.out / "alpha" / "plain.json"
    original = golden.read_bytes()
    if damage == "edited":
        golden.write_bytes(original.replace(b'"outcome": "ok"', b'"outcome": "ok" '))
    elif damage == "deleted":
        golden.unlink()
    else:
        golden.write_bytes(original + b"\n")
    written = 1
    assert matrix.run() == ((written, 3, 0), ["alpha"])
    assert golden.read_bytes() == original


@pytest.mark.parametrize("damage", ["missing", "empty", "merge-conflict", "other-format", "wrong-hash", "one-model-gone"])
@pytest.mark.slow
def test_a_missing_or_stale_index_renders_again_and_writes_nothing(matrix, damage):
    path = matrix.out / index.NAME
    text = path.read_text(encoding="utf-8")
    expected = ["alpha", "beta"]
    if damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_text("")
    elif damage == "merge-conflict":
        path.write_text(text.replace("model alpha", "<<<<<<< HEAD\nmodel alpha", 1))
    elif damage == "other-format":
        path.write_text(text.replace(f"format {index.FORMAT} ", "format 999 ", 1))
    elif damage == "wrong-hash":
        line = next(line for line in text.splitlines() if line.startswith("model beta "))
        path.write_text(text.replace(line, "model beta " + "0" * 64))
        expected = ["beta"]
    else:
        path.write_text("\n".join(line for line in text.splitlines() if " beta" not in line) + "\n")
        expected = ["beta"]
    goldens = {k: v for k, v in matrix.state().items() if k != index.NAME}
    assert matrix.run() == ((0, 4, 0), expected)
    assert {k: v for k, v in matrix.state().items() if k != index.NAME} == goldens
    assert path.read_text(encoding="utf-8") == text  # rewritten as it was


@pytest.mark.slow
def test_model_option_keeps_the_other_models_entries(matrix):
    text = (matrix.out / index.NAME).read_text(encoding="utf-8")
    matrix.write(date="2026-03-01")
    summary = regen.regenerate(models.load(matrix.config), matrix.out, ("beta",), workers=1)
    assert (summary.written, summary.unchanged) == (2, 0)
    after = (matrix.out / index.NAME).read_text(encoding="utf-8")
    alpha = [line for line in text.splitlines() if "alpha" in line]
    assert alpha == [line for line in after.splitlines() if "alpha" in line]
    assert matrix.run() == ((2, 2, 0), ["alpha"])


@pytest.mark.slow
def test_a_removed_model_leaves_the_index(matrix):
    matrix.config.write_text(MATRIX.format(**DEFAULTS).split("  beta:")[0], encoding="utf-8")
    assert matrix.run() == ((0, 2, 0), [])  # beta's directory and index lines are left alone without --prune
    assert " beta" in (matrix.out / index.NAME).read_text(encoding="utf-8")
    assert matrix.run(prune=True) == ((0, 2, 2), [])
    assert " beta" not in (matrix.out / index.NAME).read_text(encoding="utf-8")


@pytest.mark.slow
def test_force_renders_everything_and_writes_nothing_on_a_clean_tree(matrix):
    before = matrix.state()
    result = CliRunner().invoke(main, ["regenerate", "--config", str(matrix.config), "--out",
                                       str(matrix.out), "--force"])
    assert result.exit_code == 0, (result.stderr, result.exception)
    assert result.stdout.strip().splitlines()[-1] == "0 written, 4 unchanged, 0 removed"
    assert matrix.state() == before
    assert matrix.run(force=True) == ((0, 4, 0), ["alpha", "beta"])


@pytest.mark.slow
def test_worker_processes_write_the_same_bytes(matrix, tmp_path):
    elsewhere = tmp_path / "workers"
    summary = regen.regenerate(models.load(matrix.config), elsewhere, workers=2)
    assert (summary.written, summary.unchanged, summary.removed) == (4, 0, 0)
    ours = {k: v[0] for k, v in matrix.state().items()}
    theirs = {str(p.relative_to(elsewhere)): p.read_bytes() for p in sorted(elsewhere.rglob("*")) if p.is_file()}
    assert theirs == ours


# --- the code the index hashes ----------------------------------------------------------------


# What a render runs: each selected model's cases rendered with their analyses and written as
# text, every call into this package recorded by file (sources resolved before, as their files are
# hashed as data).
TRACE = """\
import json, sys
from generator.config import models
from generator.goldens import golden_file, index, regenerate, render
config = models.load(sys.argv[1])
chosen = [config.models[name] for name in (sys.argv[2:] or config.models)]
sources = regenerate.resolve_sources(config, chosen)
package, ran = str(index.PACKAGE) + "/", set()
def called(frame, event, arg):
    path = frame.f_code.co_filename
    if event == "call" and path.startswith(package) and frame.f_code.co_name != "<module>":
        ran.add(path[len(package):])
sys.setprofile(called)
for model in chosen:
    for item in render.render_model(model, sources[model.name], config):
        golden_file.dumps(item)
sys.setprofile(None)
print(json.dumps(sorted(ran)))
"""


@pytest.mark.slow
def test_the_hashed_modules_are_the_ones_a_render_of_the_matrix_runs():
    """index.RENDER is measured, not guessed: a render of every case of the committed matrix
    runs code of exactly these modules (and budget.py's deadline, which shapes no byte). A module
    that starts to run in a render must be hashed, or an edit to it would render nothing again;
    one that stops running is dropped, or an edit to it would render everything again."""
    result = subprocess.run([sys.executable, "-c", TRACE, str(ROOT / "models.yaml")], cwd=ROOT,
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    ran = set(json.loads(result.stdout))
    assert "reference.py" in ran and "analysis/prefix.py" in ran and "goldens/golden_file.py" in ran
    expected = set(index.RENDER)
    if not any(model.encoder for model in models.load(ROOT / "models.yaml").models.values()):
        expected -= set(index.ENCODER_RENDER)  # traced on a matrix with an encoder below
    assert ran - set(index.SHAPES_NOTHING) == expected


@pytest.mark.slow
def test_an_encoder_reference_runs_only_hashed_render_modules(tmp_path):
    """A model with an encoder reference (docs/references.md) runs ENCODER_RENDER in its render,
    and nothing outside RENDER."""
    (tmp_path / "models.yaml").write_text(
        "date: 2026-01-15\nmodels:\n  dsv4:\n    tokenizer: {pack: \"npm:deepseek_v3\"}\n"
        "    template: {pack: \"llama.cpp:deepseek-ai-DeepSeek-V4.jinja\"}\n"
        "    references: {encoder: deepseek-v4}\n    shapes: [plain, tool-result]\n", encoding="utf-8")
    result = subprocess.run([sys.executable, "-c", TRACE, str(tmp_path / "models.yaml")], cwd=ROOT,
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    ran = set(json.loads(result.stdout))
    assert set(index.ENCODER_RENDER) <= ran
    # installed.py reads the library versions once a process (data the index hashes as such; the
    # committed matrix's trace has read them before its render starts)
    off = ran - set(index.SHAPES_NOTHING) - {"installed.py"} - set(index.RENDER)
    assert not off, sorted(off)


def _module_name(relative: str) -> str:
    return "generator." + relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_a_render_module_reads_no_constant_of_a_module_off_the_render():
    """The trace sees code that runs, not a constant read: a render module that used a value
    defined in a module off the list (a suffix, a folder name, a limit) would let an edit to that
    value render nothing again. Every `from generator.x import NAME` and `x.NAME` of a render
    module names a function, a class or a module there, or x is itself a render module."""
    import ast
    import importlib
    import inspect

    render = {_module_name(name) for name in index.RENDER} | {_module_name(name) for name in index.SHAPES_NOTHING}

    def data(module: str, name: str) -> bool:
        value = getattr(importlib.import_module(module), name, None)
        return value is not None and not (callable(value) or inspect.ismodule(value))

    found = []
    for relative in index.RENDER:
        tree = ast.parse((index.PACKAGE / relative).read_bytes())
        aliases = {}  # a name bound to a generator module in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("generator"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if importlib.util.find_spec(full.split(".")[0]) and _is_module(full):
                        aliases[alias.asname or alias.name] = full
                    elif node.module not in render and data(node.module, alias.name):
                        found.append(f"{relative}: from {node.module} import {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("generator") and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and aliases[node.value.id] not in render and data(aliases[node.value.id], node.attr)):
                found.append(f"{relative}: {aliases[node.value.id]}.{node.attr}")
    assert set(found) == set(READ_OFF_THE_RENDER), sorted(set(found) - set(READ_OFF_THE_RENDER))


# Values of modules off the render that a render module names, each reviewed: none reaches a
# golden's bytes except as data the index hashes anyway.
READ_OFF_THE_RENDER = {
    "analysis/invariants.py: from generator import REPOSITORY": "the docs link of regenerate's review lines",
    "analysis/invariants.py: from generator import __version__": "that link's release tag, in messages only",
    "config/models.py: generator.config.engine_registry.REFERENCE": "models.yaml's default engines, read at load",
    "config/models.py: generator.config.encoders.ENCODERS": "the known encoders' names, in a bad references "
                                                             "block's line; the pin reaches goldens as their "
                                                             "provenance line, hashed as data",
    "config/request.py: generator.files.MAX_READ": "the size limit of a request file, read before any render",
    "config/dialects.py: generator.locks.DIALECTS": "where the dialect cases' lock lies and its header; what it "
                                                    "holds reaches goldens as the model parsed, hashed",
    "config/polyfill.py: generator.locks.CAPABILITIES": "where the capabilities' lock lies and its header; what it "
                                                        "holds reaches goldens as the model parsed, hashed",
    "config/shapes.py: generator.config.images.SQUARE": "an image's bytes: in the request, hashed as data",
    "config/shapes.py: generator.config.images.WIDE": "an image's bytes: in the request, hashed as data",
}


def _is_module(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


# Off the render: engines other than the reference's own, the error contract, file writes, the
# index and regenerate's orchestration, the engine registry, the render's budget, servers, HTTP.
OFF_THE_RENDER = ("engines/vllm/engine.py", "engines/llama_server/engine.py", "engines/pool.py", "engines/minijinja/engine.py",
                  "errors.py", "files.py", "budget.py", "goldens/regenerate.py", "goldens/index.py",
                  "goldens/inputs.py", "goldens/render_pool.py", "goldens/writing.py", "goldens/review.py",
                  "goldens/changes.py", "goldens/alignment.py",
                  "config/engine_registry.py", "http.py", "servers/venv.py", "progress.py", "goldens/diff.py")


def test_an_edit_off_the_render_moves_no_fingerprint_and_one_on_it_does():
    """Computed with the edited source in memory (index.code_fingerprint's `edited`): a comment
    appended anywhere moves nothing (a module is hashed as its syntax tree); code appended to a
    module off the render moves nothing either, so no golden and no index line changes; code
    appended to a render module moves the fingerprint, so every model renders again."""
    base = index.code_fingerprint()
    source = {name: (index.PACKAGE / name).read_bytes() for name in (*index.RENDER, *OFF_THE_RENDER)}
    assert index.code_fingerprint(edited={}) == base
    for name in OFF_THE_RENDER:
        assert name not in index.RENDER
        edited = source[name] + b"\n# a comment\n_edited = 1\n"
        assert index.code_fingerprint(edited={name: edited}) == base, name
    for name in index.RENDER:
        assert index.code_fingerprint(edited={name: source[name] + b"\n# a comment\n\n"}) == base, name
        assert index.code_fingerprint(edited={name: source[name] + b"\n_edited = 1\n"}) != base, name


@pytest.mark.slow
def test_the_code_fingerprint_moves_with_each_hashed_module_only(tmp_path):
    package = tmp_path / "generator"
    shutil.copytree(index.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    base = index.code_fingerprint(package)
    assert base == index.code_fingerprint()
    hashed = index.code_files(package)
    assert {p.relative_to(package).as_posix() for p in hashed} >= {
        "reference.py", "config/shapes.py", "analysis/prefix.py", "analysis/roundtrip.py",
        "goldens/golden_file.py", "goldens/render.py", "engines/transformers/engine.py", "error_text.py"}
    for path in hashed:
        original = path.read_bytes()
        path.write_bytes(original + b"\n# a comment\n\n")  # not code: nothing moves
        assert index.code_fingerprint(package) == base, path
        path.write_bytes(original + b"\n_edited = 1\n")
        assert index.code_fingerprint(package) != base, path
        path.write_bytes(original)
    for off_the_path in ("http.py", "servers/venv.py", "engines/llama_server/llama_cpp.py", "progress.py", "errors.py",
                         "files.py", "engines/vllm/engine.py", "goldens/regenerate.py", "goldens/index.py"):
        other = package / off_the_path  # no render runs them: an edit renders nothing again
        other.write_bytes(other.read_bytes() + b"\n_edited = 1\n")
        assert index.code_fingerprint(package) == base, off_the_path
    for off_the_path in ("goldens/diff.py", "analysis/prefix_report.py", "replay/reporting/report.py"):
        other = package / off_the_path  # imported by no render: an edit renders nothing again
        other.write_bytes(other.read_bytes() + b"\n_edited = 1\n")
        assert index.code_fingerprint(package) == base, off_the_path


def test_the_committed_index_is_current_so_a_fresh_clone_renders_nothing(workspace):
    """The committed regenerate.index records this checkout's code and library versions: a
    regenerate of the committed matrix loads no tokenizer and rewrites no byte, the index
    included (a change to a module the index hashes must be committed with its new index)."""
    before = (workspace / "goldens" / index.NAME).read_bytes()
    result = subprocess.run([sys.executable, "-m", "generator.cli", "regenerate", "--config",
                             str(workspace / "models.yaml"), "--out", str(workspace / "goldens")],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("0 written, ")
    assert (workspace / "goldens" / index.NAME).read_bytes() == before, \
        "goldens/regenerate.index is stale: run `goldens regenerate` and commit the index"
    assert "transformers" not in result.stderr.lower()  # nothing was rendered, so nothing imported it
