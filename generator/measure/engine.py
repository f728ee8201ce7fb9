"""Engine-side coverage: how much of an engine's request layer (how a body is parsed, normalized
and validated before any template runs) the matrix executes.

Template coverage (trace.py) measures the template on the reference's path; drift between
engines lives in their request layers instead. Each engine here names the source files of its
request layer (`LAYERS`, listed in docs/engine-coverage.md) and a tracer that replays requests
through the real engine and records which of those files' lines each request executed:

- mistral-common and minijinja run in this process, traced with coverage.py;
- vLLM runs as its managed server, started under coverage.py inside its own process
  (generator/engines/vllm/coverage.py);
- llama-server runs as a gcov build of the pinned llama.cpp (generator/engines/llama_server/coverage.py).

Each engine's module declares its `Layer` (below); the registry names it (Entry.coverage) and
coverage/engine_layers.py runs it.

The unit is a line of the engine's source that runs at request time: for Python, a statement
inside a function body (module and class preambles run at import, never per request); for C++,
a line gcov counts. Lines that run while a server starts (vLLM's warm-up render) count for no
request.

`reached(engine, model, bodies, config)` in coverage/engine_layers.py is the library entry other code
builds on: each body's set of reached (file, line) keys.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.errors import GoldensError

Key = tuple[str, int]  # (file as shown, e.g. "vllm/renderers/chat_utils.py", line)


@dataclass(frozen=True)
class Layer:
    """An engine's request layer, as its coverage module declares it: what it counts, how to
    trace requests through it (`session(model, source, config)`: a context manager yielding a
    Session) and the version the matrix runs (`version(config)`)."""

    summary: str
    session: Callable[..., Any]
    version: Callable[[Any], str]
    language: str = "python"  # its source's, for a report's code blocks ("cpp": llama-server)


@dataclass(frozen=True)
class FileCode:
    """One request-layer source file: its executable lines and its text."""

    path: str  # as shown: relative to the package or source tree root
    lines: frozenset[int]
    text: tuple[str, ...]
    functions: dict[int, str] = field(default_factory=dict, compare=False)  # line -> its function

    def row(self, line: int) -> str:
        return self.text[line - 1] if 0 < line <= len(self.text) else ""


@dataclass
class EngineCoverage:
    """The union of what several requests executed of one engine's request layer."""

    engine: str
    version: str
    files: dict[str, FileCode]
    hits: set[Key] = field(default_factory=set)
    models: list[str] = field(default_factory=list)
    requests: int = 0
    setup: set[Key] = field(default_factory=set)  # run while the engine started
    language: str = "python"  # the layer's (Layer.language)

    def lines_hit(self, path: str) -> set[int]:
        return {line for shown, line in self.hits if shown == path} & self.files[path].lines

    def lines(self, path: str) -> set[int]:
        """The file's request-time lines: its executable lines less those only start-up ran."""
        setup_only = {line for shown, line in self.setup if shown == path} - self.lines_hit(path)
        return set(self.files[path].lines) - setup_only

    @property
    def executable(self) -> int:
        return sum(len(self.lines(path)) for path in self.files)

    @property
    def setup_only(self) -> int:
        return sum(len(self.files[path].lines) - len(self.lines(path)) for path in self.files)

    @property
    def executed(self) -> int:
        return sum(len(self.lines_hit(path)) for path in self.files)

    @property
    def percent(self) -> float:
        return 100.0 * self.executed / self.executable if self.executable else 100.0

    def file_percent(self, path: str) -> float:
        total = len(self.lines(path))
        return 100.0 * len(self.lines_hit(path)) / total if total else 100.0

    def spans(self, path: str) -> list[dict[str, Any]]:
        """Never-executed lines as runs (no executed line between them), each with the source
        text from its first to its last line; the shape trace.Coverage.spans() gives."""
        code = self.files[path]
        hit = self.lines_hit(path)
        out: list[dict[str, Any]] = []
        previous_missed, previous_function = False, None
        for line in sorted(self.lines(path)):
            missed = line not in hit
            function = code.functions.get(line, "")
            if missed and previous_missed and function == previous_function:
                out[-1]["lines"][1] = line
            elif missed:
                out.append({"lines": [line, line], "function": function})
            previous_missed, previous_function = missed, function
        for span in out:
            first, last = span["lines"]
            span["text"] = "\n".join(code.row(n) for n in range(first, last + 1))
            span["partly"] = False
        return out

    # ---- per function: the request layer's reachable set (reach.py), the unit the issue asks for

    def function_lines(self) -> dict[str, set[int]]:
        """Each reachable function ("path:qualname") -> its own statements (nested functions'
        lines are theirs); a file without a reachable set counts every function it holds."""
        out: dict[str, set[int]] = {}
        for path, code in self.files.items():
            for line, name in code.functions.items():
                out.setdefault(f"{path}:{name}", set()).add(line)
        return out

    def function_status(self) -> dict[str, str]:
        """Each function -> "executed" (a request ran one of its lines), "setup-only" (only
        start-up did: a cached call, no request's to reach) or "never"."""
        out = {}
        setup = {key for key in self.setup}
        for key, lines in self.function_lines().items():
            path = key.split(":", 1)[0]
            if any((path, line) in self.hits for line in lines):
                out[key] = "executed"
            elif any((path, line) in setup for line in lines):
                out[key] = "setup-only"
            else:
                out[key] = "never"
        return out

    def function_status_counts(self) -> dict[str, int]:
        counts = {"executed": 0, "setup-only": 0, "never": 0}
        for status in self.function_status().values():
            counts[status] += 1
        return counts

    @property
    def functions_counted(self) -> tuple[int, int]:
        """(executed, counted): the reachable functions a request ran, of those a request can
        reach (the set less the functions only start-up ran)."""
        status = self.function_status()
        counted = [s for s in status.values() if s != "setup-only"]
        return sum(1 for s in counted if s == "executed"), len(counted)

    @property
    def function_percent(self) -> float:
        executed, counted = self.functions_counted
        return 100.0 * executed / counted if counted else 100.0

    def record(self) -> dict[str, Any]:
        status = self.function_status()
        executed, counted = self.functions_counted
        return {
            "engine": self.engine, "version": self.version, "models": list(self.models),
            "requests": self.requests, "setup_only": self.setup_only, "executed": self.executed, "executable": self.executable,
            "percent": round(self.percent, 1),
            "functions": {"executed": executed, "counted": counted, "percent": round(self.function_percent, 1),
                          "setup_only": sorted(k for k, s in status.items() if s == "setup-only"),
                          "never_executed": sorted(k for k, s in status.items() if s == "never")},
            "files": {path: {"executed": len(self.lines_hit(path)), "executable": len(self.lines(path)),
                             "percent": round(self.file_percent(path), 1), "never_executed": self.spans(path)}
                      for path, code in self.files.items()},
        }


# ------------------------------------------------------------------ Python sources

def function_lines(source: str, statements: Iterable[int]) -> dict[int, str]:
    """The statements that lie inside a function body (what can run per request), each with its
    innermost function's name; a function's own `def` line and its decorators run at import,
    unless the function is nested."""
    tree = ast.parse(source)
    owner: dict[int, tuple[int, str]] = {}  # line -> (body size, function): the innermost wins

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                first, last = child.body[0].lineno, child.body[-1].end_lineno or child.body[-1].lineno
                for line in range(first, last + 1):
                    if line not in owner or owner[line][0] > last - first:
                        owner[line] = (last - first, name)
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return {line: owner[line][1] for line in statements if line in owner}


def python_file(path: Path, shown: str, only: set[str] | None = None) -> FileCode:
    """A Python file's request-time statements, as coverage.py's parser finds statements;
    `only`: the statements of these functions alone (the request layer's reachable set)."""
    from coverage.parser import PythonParser

    text = path.read_text(encoding="utf-8")
    parser = PythonParser(text=text, filename=str(path))
    parser.parse_source()
    functions = function_lines(text, parser.statements)
    if only is not None:
        functions = {line: name for line, name in functions.items() if name in only}
    return FileCode(shown, frozenset(functions), tuple(text.splitlines()), functions)


def reachable_files(root: Path, spec) -> tuple[dict[str, Path], dict[str, FileCode]]:
    """The files holding the request layer's reachable functions (reach.Spec) under `root`, and
    each file's code restricted to them: the denominator is the reachable set, so is the
    numerator."""
    from generator.measure import reach

    found = reach.functions(root, spec)
    paths = {shown: root / shown for shown in sorted(found)}
    return paths, {shown: python_file(path, shown, found[shown]) for shown, path in paths.items()}


def installed_reachable(package: str, spec) -> tuple[dict[str, Path], dict[str, FileCode]]:
    """reachable_files for an installed package (by its import name), under the site directory
    it was imported from."""
    module = __import__(package)
    return reachable_files(Path(module.__file__).resolve().parent.parent, spec)


def python_files(root: Path, relative: Sequence[str]) -> dict[str, Path]:
    """Each listed file (globs allowed) under `root`, shown relative to `root`."""
    out: dict[str, Path] = {}
    for pattern in relative:
        matches = sorted(root.glob(pattern))
        if not matches:
            raise GoldensError(f"engine coverage: {root} has no {pattern}")
        for path in matches:
            if path.name != "__init__.py" or path.stat().st_size:
                out[path.relative_to(root).as_posix()] = path
    return out


def keys_by_context(data, files: dict[str, Path], contexts: Sequence[str]) -> list[set[Key]]:
    """Per context name (one per request; "" is start-up), the (file, line) keys coverage.py
    recorded in it."""
    index = {name: i for i, name in enumerate(contexts)}
    out: list[set[Key]] = [set() for _ in contexts]
    measured = {str(Path(f).resolve()): f for f in data.measured_files()}
    for shown, path in files.items():
        recorded = measured.get(str(path.resolve()))
        if recorded is None:
            continue
        for line, names in data.contexts_by_lineno(recorded).items():
            for name in names:
                if name in index:
                    out[index[name]].add((shown, line))
    return out


@dataclass
class Session:
    """One engine opened for one model: its request layer's `files`, `run(requests, each=True)`
    -> per request the keys it reached (each=False: one set for them all is enough; a server's
    session fills the sets as it ends), and `setup`, the keys the engine's start-up ran (filled
    by the end of the session): a line that only start-up runs is no request's to reach."""

    files: dict[str, FileCode]
    run: Callable[..., list[set[Key]]]
    setup: set[Key] = field(default_factory=set)


class InProcess:
    """coverage.py in this process: the engine made under it (start-up, context ""), then each
    request in a dynamic context of its own. A refusal or an engine error (any exception, as
    `check` takes it) is that request's outcome: the lines it reached before it count."""

    def __init__(self, files: dict[str, Path], make: Callable[[], Any], call: Callable[[Any, dict], Any],
                 code: dict[str, FileCode] | None = None):
        import coverage

        self.files, self.call, self.runs, self.code = files, call, 0, code
        self.cov = coverage.Coverage(data_file=None, include=[str(p) for p in files.values()], config_file=False)
        self.cov.start()
        try:
            self.engine = make()
        finally:
            self.cov.stop()

    def session(self) -> Session:
        session = Session(self.code if self.code is not None else
                          {shown: python_file(path, shown) for shown, path in self.files.items()}, self.run)
        session.setup |= keys_by_context(self.cov.get_data(), self.files, [""])[0]
        return session

    def run(self, requests: Sequence[dict], each: bool = True) -> list[set[Key]]:
        self.runs += 1
        names = [f"run-{self.runs}-request-{i}" for i in range(len(requests))]
        self.cov.start()
        try:
            for name, request in zip(names, requests):
                self.cov.switch_context(name)
                try:
                    self.call(self.engine, request)
                except Exception:  # noqa: BLE001 - as judge.py: a refusal, or an engine library's own error, is this request's outcome
                    pass
        finally:
            self.cov.stop()
        return keys_by_context(self.cov.get_data(), self.files, names)
