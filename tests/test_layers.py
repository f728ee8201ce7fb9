"""Every stage imports only downward, and no modules import each other in a circle (issue 43
items 1 and 3: replay/'s parts are ordered stages too): generator/layers.py declares the order,
docs/architecture.md lists it, and this file holds the package to both. Imports inside functions
count: a lazy import still ties a stage to the one it reaches.
"""

from __future__ import annotations

import re

from conftest import ROOT

from generator import layers


def _package(root, files: dict[str, str]):
    package = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


def test_the_checker_names_an_upward_import_and_a_circle(tmp_path):
    package = _package(tmp_path, {
        "low.py": "def f():\n    from pkg.high import g\n",  # upward, and lazy
        "high.py": "from pkg import low\n",
        "mid/__init__.py": "",
        "mid/a.py": "import pkg.mid.b\n",
        "mid/b.py": "from pkg.mid import a\n",  # a circle inside one stage: allowed by order, not by circles
        "stray.py": "",
    })
    graph = layers.imports(package)
    assert graph["pkg.low"] == {"pkg", "pkg.high"}
    assert layers.upward(graph, ("__init__", "low", "mid", "high", "stray")) == ["pkg.low -> high"]
    assert layers.circles(graph) == [["pkg.high", "pkg.low"], ["pkg.mid.a", "pkg.mid.b"]]
    assert layers.upward(graph, ("__init__", "low", "mid", "high")) == [
        "pkg.low -> high", "pkg.stray: stage 'stray' is not in LAYERS"]


def test_the_checker_resolves_relative_imports_and_names_under_a_module(tmp_path):
    package = _package(tmp_path, {
        "base.py": "from .top import Thing\n",
        "top.py": "from pkg.base import VALUE\n",
    })
    graph = layers.imports(package)
    assert graph == {"pkg": set(), "pkg.base": {"pkg", "pkg.top"}, "pkg.top": {"pkg", "pkg.base"}}
    assert layers.upward(graph, ("__init__", "base", "top")) == ["pkg.base -> top"]
    assert layers.circles(graph) == [["pkg.base", "pkg.top"]]


def test_a_divided_stage_orders_its_parts(tmp_path):
    """A folder LAYERS divides (as replay/ is into judging, reporting, running, releases) holds its
    parts to their order like stages: a lazy import of a later part is named, and so is a module
    of the folder that belongs to no declared part."""
    package = _package(tmp_path, {
        "base.py": "",
        "split/__init__.py": "",
        "split/low/__init__.py": "",
        "split/low/a.py": "def f():\n    from pkg.split.high import b\n",  # upward between parts, and lazy
        "split/high/__init__.py": "",
        "split/high/b.py": "from pkg.split.low import a\nfrom pkg import base\n",
        "split/loose.py": "",
    })
    order = ("__init__", "base", "split", "split.low", "split.high")
    graph = layers.imports(package)
    assert [layers.stage(m, order) for m in ("pkg", "pkg.split", "pkg.split.low", "pkg.split.high.b")] == [
        "__init__", "split", "split.low", "split.high"]
    assert layers.upward(graph, order) == [
        "pkg.split.loose: stage 'split.loose' is not in LAYERS", "pkg.split.low.a -> split.high"]
    assert layers.upward(graph, ("__init__", "base", "split", "split.high", "split.low", "split.loose")) == [
        "pkg.split.high.b -> split.low"]
    assert layers.circles(graph) == [["pkg.split.high.b", "pkg.split.low.a"]]


def test_replays_parts_are_held_to_their_order():
    """replay/'s parts are stages of their own: running a check judges through judging and writes
    through reporting, so an order putting reporting after running is refused by the check."""
    order = list(layers.LAYERS)
    parts = [name for name in order if name.startswith("replay.")]
    assert parts == ["replay.judging", "replay.reporting", "replay.running", "replay.releases"]
    graph = layers.imports(ROOT / "generator")
    swapped = [{"replay.reporting": "replay.running", "replay.running": "replay.reporting"}.get(n, n) for n in order]
    assert "generator.replay.running.check -> replay.reporting" in layers.upward(graph, swapped)
    replay = [m for m in layers.modules(ROOT / "generator") if m.startswith("generator.replay")]
    assert {layers.stage(m) for m in replay} == {"replay", *parts}


def test_generator_imports_only_downward():
    problems = layers.upward(layers.imports(ROOT / "generator"))
    assert problems == [], "upward imports (module -> stage it may not import):\n" + "\n".join(problems)


def test_generator_has_no_import_circle():
    found = layers.circles(layers.imports(ROOT / "generator"))
    assert found == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_every_stage_in_layers_exists():
    stages = {layers.stage(module) for module in layers.modules(ROOT / "generator")}
    assert set(layers.LAYERS) == stages


def test_the_architecture_doc_lists_the_stages_in_the_same_order():
    """docs/architecture.md's folder list names each stage in LAYERS's order."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## The pipeline's folders", 1)[1].split("```", 2)[1]
    named = re.findall(r"(?:^  |; )([a-z_]+(?:/[a-z_]+)*)(?:\.py|/)", block, flags=re.M)
    stages = [name.replace("/", ".") for name in named]
    assert [name for name in stages if name in layers.LAYERS] == list(layers.LAYERS)


def test_cli_calls_only_the_commands_package():
    """cli.py's commands are thin: each calls one function of generator/commands/, which sits above
    every stage, so a command may join stages without a stage importing upward."""
    text = (ROOT / "generator" / "cli.py").read_text(encoding="utf-8")
    targets = re.findall(r'call\("([\w.]+):(\w+)"', text)
    assert len(targets) >= 15
    known = layers.modules(ROOT / "generator")
    for module, name in targets:
        assert module.startswith("generator.commands.") and module in known, module
        assert re.search(rf"^def {name}\(", known[module].read_text(encoding="utf-8"), flags=re.M), (module, name)
