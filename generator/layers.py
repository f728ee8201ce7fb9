"""The pipeline's stages in the order they build on each other, and the check that keeps it.

A stage is a folder of generator/ or a module at its top, or, for a folder LAYERS divides
("replay.judging", "replay.reporting", ...), a folder or module inside it: a divided folder's
own __init__ is the stage named by the folder, and anything else in it must be one of its
declared parts, so the concerns inside it keep an order too. A module may import from its own
stage and the stages before it in LAYERS, never after: so each stage works as a plain library
with only what is below it, and a change to a stage cannot break one beneath. Import circles
are refused too, counting imports inside functions, since a lazy import still ties two modules
together. tests/test_layers.py runs the check; docs/architecture.md lists the same order.
"""
from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

LAYERS: tuple[str, ...] = (
    "__init__",  # generator/__init__.py: the version and the project's repository
    "layers",
    "error_text",
    "errors",
    "canonical",
    "documents",
    "redaction",
    "files",
    "installed",
    "machine",
    "json_reader",
    "locks",
    "http",
    "budget",
    "progress",
    "markdown",
    "heavy",
    "workers",
    "config",
    "sources",
    "render_worker",
    "reference",
    "parse_reference",
    "encoder",
    "servers",
    "measure",
    "engines",
    "analysis",
    "coverage",
    "goldens",
    "replay",  # replay/__init__.py only: replay is divided into the four below
    "replay.judging",
    "replay.reporting",
    "replay.running",
    "replay.releases",
    "init",
    "commands",
    "cli_support",
    "pytest_plugin",
    "cli",
)


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package at root (a folder holding __init__.py), by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def stage(module: str, layers: Sequence[str] = LAYERS) -> str:
    """The stage a dotted module name belongs to: its folder or top-level module under the package,
    or, inside a folder `layers` divides, the part of it (e.g. 'replay.judging'; a part not declared
    comes back as its name, which is not in `layers`, so the check names it)."""
    parts = module.split(".")
    if len(parts) < 2:
        return "__init__"
    if len(parts) > 2 and any(name.startswith(parts[1] + ".") for name in layers):
        return f"{parts[1]}.{parts[2]}"
    return parts[1]


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module a dotted name starts with (a name may end in a class or function)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def imports(root: Path) -> dict[str, set[str]]:
    """Each module's imports of modules in the same package, at any depth of its code.

    Importing a.b.c runs a and a.b first, so a package's __init__ counts as imported too;
    `from pkg import x` imports the module pkg.x when there is one, else pkg itself.
    """
    known = modules(root)
    package = root.name
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                names = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for name in names:
                if name != package and not name.startswith(package + "."):
                    continue
                target = _resolve(name, known)
                while target:
                    if target != module:
                        targets.add(target)
                    target = target.rpartition(".")[0]
        graph[module] = targets
    return graph


def upward(graph: dict[str, set[str]], layers: Sequence[str] = LAYERS) -> list[str]:
    """'module -> stage' for each import of a later stage, and 'module: stage not in LAYERS'."""
    rank = {name: index for index, name in enumerate(layers)}
    problems = set()
    for module, targets in graph.items():
        mine = stage(module, layers)
        if mine not in rank:
            problems.add(f"{module}: stage {mine!r} is not in LAYERS")
            continue
        for target in targets:
            theirs = stage(target, layers)
            if theirs not in rank:
                problems.add(f"{target}: stage {theirs!r} is not in LAYERS")
            elif rank[theirs] > rank[mine]:
                problems.add(f"{module} -> {theirs}")
    return sorted(problems)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)
