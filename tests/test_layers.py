"""Every stage imports only downward, and no modules import each other in a circle (issue 43
item 1): generator/layers.py declares the order, docs/architecture.md lists it, and this file
holds the package to both. Imports inside functions count: a lazy import still ties a stage to
the one it reaches.
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
