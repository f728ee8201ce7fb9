"""Engine-side coverage's own arithmetic (generator/measure/engine.py): which lines count, how
never-executed spans are cut, and the gcov build's compiler launcher. The real engines are
traced in test_engine_coverage_engines.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from generator.cli import main
from generator.config import engine_registry
from generator.engines.llama_server import llama_cpp
from generator.measure import engine

SOURCE = '''"""doc"""
import os

LIMIT = 3


def parse(body):
    if body is None:
        return None

    def inner(x):
        return x + 1
    return inner(body)


class Request:
    field = 1

    def check(self):
        return self.field
'''


def test_only_function_bodies_count_each_with_its_function():
    statements = [2, 4, 7, 8, 9, 11, 12, 13, 16, 17, 19, 20]  # what coverage.py's parser lists
    functions = engine.function_lines(SOURCE, statements)
    # imports, constants, class bodies and top-level `def` lines run at import, not per request
    assert functions == {8: "parse", 9: "parse", 11: "parse", 12: "parse.inner", 13: "parse",
                         20: "Request.check"}


def code(lines, functions) -> engine.FileCode:
    return engine.FileCode("x.py", frozenset(lines), tuple(f"row {n}" for n in range(1, 21)), functions)


def test_spans_stop_at_a_function_boundary_and_leave_start_up_lines_out():
    functions = {2: "a", 3: "a", 5: "a", 7: "b", 8: "b", 9: "b"}
    coverage = engine.EngineCoverage("e", "1", {"x.py": code(functions, functions)},
                                     hits={("x.py", 8)}, setup={("x.py", 9), ("x.py", 8)})
    # 9 ran only at start-up: not the request layer's; 8 ran at start-up and for a request
    assert coverage.lines("x.py") == {2, 3, 5, 7, 8}
    assert (coverage.executed, coverage.executable, coverage.setup_only) == (1, 5, 1)
    spans = coverage.spans("x.py")
    assert [(s["lines"], s["function"]) for s in spans] == [([2, 5], "a"), ([7, 7], "b")]
    assert spans[0]["text"] == "row 2\nrow 3\nrow 4\nrow 5"
    record = coverage.record()["files"]["x.py"]
    assert (record["executed"], record["executable"], record["percent"]) == (1, 5, 20.0)


def launch(tmp_path, *command) -> str:
    launcher = Path(llama_cpp.__file__).with_name("gcov_launcher.py")
    result = subprocess.run([sys.executable, str(launcher), "common/chat.cpp,tools/server/server-common.cpp",
                             *command], capture_output=True, text=True, check=True,
                            env={**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    return result.stdout.strip()


def test_the_launcher_instruments_the_listed_sources_only(tmp_path):
    fake = tmp_path / "ccache"  # stands for ccache: says it ran, then runs the compiler
    fake.write_text('#!/bin/sh\necho ccache; exec "$@"\n')
    fake.chmod(0o755)
    listed = launch(tmp_path, str(fake), "echo", "-O3", "-c", "/b/src/common/chat.cpp", "-o", "chat.o")
    assert listed == "-O3 -c /b/src/common/chat.cpp -o chat.o --coverage -O0"  # ccache skipped
    other = launch(tmp_path, str(fake), "echo", "-O3", "-c", "/b/src/common/chat-peg-parser.cpp")
    assert other == "ccache\n-O3 -c /b/src/common/chat-peg-parser.cpp"  # as the normal build


def test_a_variant_runs_its_launcher_before_ccache_or_alone():
    with_cache = llama_cpp._prefix_launcher(["py", "l.py", "a.cpp"], ["-DCMAKE_C_COMPILER_LAUNCHER=/u/ccache"])
    assert with_cache == ["-DCMAKE_C_COMPILER_LAUNCHER=py;l.py;a.cpp;/u/ccache"]
    alone = llama_cpp._prefix_launcher(["py"], [])
    assert alone == ["-DCMAKE_C_COMPILER_LAUNCHER=py", "-DCMAKE_CXX_COMPILER_LAUNCHER=py"]


def test_an_engine_without_a_request_layer_trace_is_one_error_line():
    result = CliRunner().invoke(main, ["coverage", "--engine", "ollama"])
    assert result.exit_code == 2
    measured = [info.name for info in engine_registry.BUILT_IN if info.coverage is not None]
    assert measured and "ollama" not in measured
    assert result.output.strip().splitlines() == [
        f"goldens: error: --engine ollama: engine coverage measures {', '.join(measured)}"]


MODULE = '''def setup():
    return "made"


def call(request):
    if request["x"]:
        return 1
    raise ValueError("refused")
'''


def test_each_request_gets_its_own_lines_and_a_failing_one_keeps_what_it_reached(tmp_path):
    import importlib.util

    path = tmp_path / "layer.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("goldens_test_layer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    traced = engine.InProcess({"layer.py": path}, module.setup, lambda made, request: module.call(request))
    assert traced.engine == "made"
    session = traced.session()
    assert session.setup == {("layer.py", 2)}  # what making the engine ran: no request's
    assert set(session.files["layer.py"].lines) == {2, 6, 7, 8}
    first, second = session.run([{"x": 1}, {"x": 0}])
    assert first == {("layer.py", 6), ("layer.py", 7)}
    assert second == {("layer.py", 6), ("layer.py", 8)}  # it raised: still its lines
