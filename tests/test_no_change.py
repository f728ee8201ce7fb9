"""Issue 43: a `goldens regenerate` with nothing changed does work that does not grow with the
matrix: per golden a stat, per model memo hits; it reads no golden, builds no case, compiles no
template, loads no tokenizer and prints one line. Work is counted, not timed (bench/no_change.py
measures the CPU against the floor of the same run). The doubled matrix is built by
bench/no_change.py's `double`: every model listed twice, the copies' goldens and index entries
made as a render would make them.

The memo that skips building cases (goldens/index.py inputs_and_cases) must never hide an edit:
each kind of input a model's cases and goldens are made from, edited, renders the model again.
"""

from __future__ import annotations

import builtins
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import source_of

from generator import reference
from generator.cli import main
from generator.config import cases as cases_module
from generator.config import models
from generator.goldens import index
from generator.goldens import regenerate as regen

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_no_change", ROOT / "bench" / "no_change.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Work:
    """What one in-process `goldens regenerate` did: files opened and stat'ed under the goldens
    folder, cases built, models rendered, templates compiled, tokenizers loaded, and its stdout."""

    def __init__(self, monkeypatch, out: Path):
        import jinja2

        self.out = os.path.realpath(out)
        self.opened: list[str] = []
        self.stats: list[str] = []
        self.counts = {"cases built": 0, "models rendered": 0, "templates compiled": 0}

        def recording(real, into):
            def wrapper(path, *args, **kwargs):
                if isinstance(path, (str, os.PathLike)):
                    into.append(os.path.abspath(path))
                return real(path, *args, **kwargs)
            return wrapper

        def counting(real, key):
            def wrapper(*args, **kwargs):
                self.counts[key] += 1
                return real(*args, **kwargs)
            return wrapper

        for module, name in ((os, "open"), (io, "open"), (builtins, "open")):
            monkeypatch.setattr(module, name, recording(getattr(module, name), self.opened))
        for name in ("stat", "lstat"):
            monkeypatch.setattr(os, name, recording(getattr(os, name), self.stats))
        for name in ("all_cases", "model_cases", "parse_cases_of"):
            monkeypatch.setattr(cases_module, name, counting(getattr(cases_module, name), "cases built"))
        monkeypatch.setattr(regen, "render_model", counting(regen.render_model, "models rendered"))
        monkeypatch.setattr(jinja2.Environment, "compile",
                            counting(jinja2.Environment.compile, "templates compiled"))

    def run(self, config: Path, out: Path) -> list[str]:
        reference.load_tokenizer.cache_clear()
        self.opened.clear()
        self.stats.clear()
        self.counts.update(dict.fromkeys(self.counts, 0))
        result = CliRunner().invoke(main, ["regenerate", "--config", str(config), "--goldens", str(out)])
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
        self.counts["tokenizers loaded"] = reference.load_tokenizer.cache_info().misses
        return result.output.splitlines()  # stdout and stderr as a terminal shows them

    def under_out(self, paths: list[str]) -> list[str]:
        return [p for p in paths if p.startswith(self.out + os.sep) and os.sep + "causes" + os.sep not in p]


def goldens_of(config: Path) -> list[str]:
    return [case.id for model in models.load(config).models.values() for case in cases_module.all_cases(model)]


def test_a_no_change_run_does_the_same_work_per_golden_at_twice_the_goldens(tmp_path, monkeypatch):
    bench = _bench()
    today = bench.copy_matrix(ROOT / "models.yaml", ROOT / "goldens", tmp_path / "today")
    doubled = bench.double(ROOT / "models.yaml", ROOT / "goldens", tmp_path / "doubled")
    counted = {name: goldens_of(config) for name, (config, _) in (("today", today), ("doubled", doubled))}
    assert len(counted["doubled"]) == 2 * len(counted["today"])
    for config, out in (today, doubled):  # a new copy: its goldens hashed once, its memos made
        CliRunner().invoke(main, ["regenerate", "--config", str(config), "--goldens", str(out)])

    work = Work(monkeypatch, tmp_path)
    seen = {}
    for name, (config, out) in (("today", today), ("doubled", doubled)):
        work.out = os.path.realpath(out)
        lines = work.run(config, out)
        assert lines == [f"0 written, {len(counted[name])} unchanged, 0 removed"], lines[:5]  # one line
        assert work.counts == {"cases built": 0, "models rendered": 0, "templates compiled": 0,
                               "tokenizers loaded": 0}, name
        assert set(work.under_out(work.opened)) == {os.path.join(work.out, index.NAME)}, name  # the index, no golden
        golden_stats = [p for p in work.under_out(work.stats) if p.endswith(".json")]
        assert sorted(golden_stats) == sorted(os.path.join(work.out, f"{c}.json") for c in counted[name]), name
        seen[name] = (len(work.opened), len(work.stats) - len(golden_stats))
    # beyond one stat per golden, what the doubled matrix adds is per model (its lines of
    # models.yaml, its source's memos), never per golden: at most the single matrix's work again
    assert seen["doubled"][0] <= 2 * seen["today"][0], seen
    assert seen["doubled"][1] <= 2 * seen["today"][1], seen


def test_the_doubled_matrix_is_one_a_render_would_leave(tmp_path):
    """The copies are real members of their matrix: each golden reads back under its own path
    (its case renamed, nothing else), and the copies' index lines are the originals' goldens."""
    from generator.goldens import golden_file

    config, out = _bench().double(ROOT / "models.yaml", ROOT / "goldens", tmp_path)
    loaded = models.load(config)
    saved = index.load(out)
    for name in ("qwen3", "gemma3"):
        copy = name + "-b"
        assert copy in loaded.models and copy in saved.models
        for case in cases_module.all_cases(loaded.models[copy])[:5]:
            item = golden_file.read(golden_file.golden_path(out, case.id))
            twin = golden_file.read(golden_file.golden_path(out, name + case.id[len(copy):]))
            assert (item.ids, item.prompt, item.request) == (twin.ids, twin.prompt, twin.request)
        assert len(saved.models[copy].goldens) == len(saved.models[name].goldens)


# --- the memo never hides an edit ------------------------------------------------------------------

ONE_MODEL = """\
models:
  alpha:
    tokenizer: {dir: alpha-tok}
    template: {file: alpha.jinja}
    shapes: {only: [plain], requests: [req/*.json]}
"""


@pytest.fixture
def one_model(tmp_path, monkeypatch):
    """One model with a `dir:` tokenizer (Phi-3.5's), a template file and a request file, rendered
    once in this process; `run()` says which runs built cases and loaded the tokenizer."""
    phi = source_of("phi3.5")
    shutil.copytree(phi.tokenizer_dir, tmp_path / "alpha-tok")
    (tmp_path / "alpha.jinja").write_text(phi.template, encoding="utf-8")
    (tmp_path / "req").mkdir()
    (tmp_path / "req" / "asked.json").write_text(json.dumps(
        {"messages": [{"role": "user", "content": "Hello"}]}), encoding="utf-8")
    (tmp_path / "models.yaml").write_text(ONE_MODEL, encoding="utf-8")
    built = {"cases": 0}
    real = cases_module.all_cases

    def counted(model):
        built["cases"] += 1
        return real(model)

    monkeypatch.setattr(cases_module, "all_cases", counted)

    def run() -> tuple[int, int, int]:
        """(cases built, tokenizers loaded, goldens written)."""
        built["cases"] = 0
        reference.load_tokenizer.cache_clear()
        summary = regen.regenerate(models.load(tmp_path / "models.yaml"), tmp_path / "goldens", workers=1)
        return built["cases"], reference.load_tokenizer.cache_info().misses, summary.written

    assert run()[1:] == (1, 2)
    assert run() == (0, 0, 0)  # the memo holds: no case built
    return tmp_path, run


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


EDITS = {  # name -> (the edit, goldens written by the run after it)
    "models.yaml": (lambda root: _append(root / "models.yaml", "    kwargs: {date_string: 15 Jan 2026}\n"), 2),
    "request-file": (lambda root: (root / "req" / "asked.json").write_text(json.dumps(
        {"messages": [{"role": "user", "content": "Hello again"}]}), encoding="utf-8"), 1),
    "request-file-added": (lambda root: (root / "req" / "more.json").write_text(json.dumps(
        {"messages": [{"role": "user", "content": "More"}]}), encoding="utf-8"), 1),
    "template": (lambda root: _append(root / "alpha.jinja", "x"), 2),
    "tokenizer-file": (lambda root: _edit_json(root / "alpha-tok" / "tokenizer_config.json",
                                               model_max_length=4096), 2),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", EDITS)
def test_an_edit_to_each_kind_of_input_renders_again(one_model, name):
    root, run = one_model
    edit, written = EDITS[name]
    edit(root)
    _, loaded, done = run()
    assert (loaded, done) == (1, written)
    assert run() == (0, 0, 0)  # and the next run is a memo hit again (the memo is by content: an
    # edit made before, in another run of this test, may already be remembered; the render above
    # is what shows the memo gave the edited inputs)


def test_the_memo_misses_on_other_render_code_and_moves_the_inputs(monkeypatch):
    """An edit to a render module moves the code fingerprint (tests/test_index.py); a moved
    fingerprint is a memo miss and other inputs, so the model renders again."""
    config = models.load(ROOT / "models.yaml")
    model = config.models["phi3.5"]
    source = source_of("phi3.5")
    stamp = regen.provenance(source, config)
    versions = index.library_versions()
    built = []
    monkeypatch.setattr(cases_module, "all_cases", lambda m, real=cases_module.all_cases: built.append(m) or real(m))
    code = index.code_fingerprint()
    first = index.inputs_and_cases(model, source, config, stamp, code, versions)
    built.clear()
    assert index.inputs_and_cases(model, source, config, stamp, code, versions) == first
    assert built == []  # a hit
    other_code = index.sha256(f"other code {os.getpid()} {time.time_ns()}")  # never remembered before
    other = index.inputs_and_cases(model, source, config, stamp, other_code, versions)
    assert built == [model] and other[0] != first[0] and other[1] == first[1]
    # what the memo returns is what building the cases gives
    cases = cases_module.all_cases(model)
    assert first == (index.model_inputs(model, source, config, cases, stamp, code, versions), [c.id for c in cases])


def test_the_cases_fingerprint_moves_with_each_file_it_names(tmp_path):
    package = tmp_path / "generator"
    for name in index.CASES_CODE:
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(index.PACKAGE / name, package / name)
    for name in index.CASES_DATA:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(index.PACKAGE.parent / name, tmp_path / name)
    base = index.cases_fingerprint(package)
    for path in [package / n for n in index.CASES_CODE] + [tmp_path / n for n in index.CASES_DATA]:
        before = path.read_bytes()
        path.write_bytes(before + b"\n")
        assert index.cases_fingerprint(package) != base, path
        path.write_bytes(before)
        assert index.cases_fingerprint(package) == base, path


CASES_TRACE = """\
import dataclasses, io, json, os, sys
from generator.config import cases, dialects, models, polyfill
from generator.config.shapes import SHAPES
from generator.goldens import index
config = models.load(sys.argv[1])
package, ran, read = str(index.PACKAGE) + "/", set(), set()
real_open = io.open
def opened(path, *args, **kwargs):
    read.add(os.path.realpath(path))
    return real_open(path, *args, **kwargs)
def called(frame, event, arg):
    path = frame.f_code.co_filename
    if event == "call" and path.startswith(package) and frame.f_code.co_name != "<module>":
        ran.add(path[len(package):])
every = tuple(dialects.DIALECTS)
wide = []
for model in config.models.values():  # every shape, every dialect case, a refused capability each
    shapes = tuple(SHAPES) + tuple(model.requests)
    wide.append(dataclasses.replace(model, shapes=shapes, dialect_cases=tuple(dialects.candidates(shapes, every)),
                                    capabilities={**model.capabilities, "tools": "refused", "system_role": "refused"}))
import builtins
builtins.open = io.open = opened
sys.setprofile(called)
for model in wide:
    cases.all_cases(model)
sys.setprofile(None)
print(json.dumps([sorted(ran), sorted(read)]))
"""


@pytest.mark.slow  # traces every case builder over every model's shapes, dialects and polyfills
def test_cases_are_built_only_from_hashed_code_and_data():
    """inputs_and_cases is keyed by the render's code and CASES_CODE / CASES_DATA: building every
    shape, dialect case and polyfill of the matrix runs no other module of this project and reads
    no other file, or an edit there would be hidden by the memo."""
    result = subprocess.run([sys.executable, "-c", CASES_TRACE, str(ROOT / "models.yaml")], cwd=ROOT,
                            capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    ran, read = json.loads(result.stdout)
    assert "config/cases.py" in ran and "config/shapes.py" in ran and "config/dialects.py" in ran
    assert set(ran) <= set(index.RENDER) | set(index.CASES_CODE), set(ran) - set(index.RENDER) - set(index.CASES_CODE)
    data = {os.path.realpath(index.PACKAGE.parent / name) for name in index.CASES_DATA}
    assert set(read) <= data, set(read) - data
