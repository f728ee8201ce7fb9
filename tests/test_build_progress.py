"""llama.cpp builds: every usable core by default, only the llama-server target, and progress on
stderr from the first line (naming the log) to the last.

The command line is the one build_llama_server runs (build_commands); the progress run is a real
CMake build, of a small C project rather than of llama.cpp (a cold llama.cpp build is tens of
minutes here), through the same run_build a llama.cpp build uses, in a subprocess whose stderr is
a pipe, as in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.errors import GoldensError
from generator.servers import llama_cpp

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_job_settings(monkeypatch):
    monkeypatch.delenv("GOLDENS_BUILD_JOBS", raising=False)
    monkeypatch.delenv("CMAKE_BUILD_PARALLEL_LEVEL", raising=False)


def _source(root: Path) -> Path:
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\nproject(probe C)\n"
                                         "option(LLAMA_BUILD_TESTS \"tests\" ON)\n")
    return root


def test_the_build_runs_on_every_usable_core(no_job_settings, tmp_path):
    steps = llama_cpp.build_commands(_source(tmp_path), tmp_path / "build", 11434)
    assert steps[1] == ["cmake", "--build", str(tmp_path / "build"), "--parallel",
                        str(len(os.sched_getaffinity(0))), "--target", "llama-server"]
    assert "-DLLAMA_BUILD_TESTS=OFF" in steps[0]


def test_job_count_follows_cmake_then_goldens_settings(no_job_settings, monkeypatch, tmp_path):
    source = _source(tmp_path)
    monkeypatch.setenv("CMAKE_BUILD_PARALLEL_LEVEL", "3")
    assert llama_cpp.build_commands(source, tmp_path / "b", 1)[1][3:5] == ["--parallel", "3"]
    monkeypatch.setenv("GOLDENS_BUILD_JOBS", "5")
    assert llama_cpp.build_commands(source, tmp_path / "b", 1)[1][3:5] == ["--parallel", "5"]
    monkeypatch.setenv("GOLDENS_BUILD_JOBS", "many")
    with pytest.raises(GoldensError, match="GOLDENS_BUILD_JOBS='many': expected a whole number"):
        llama_cpp.build_commands(source, tmp_path / "b", 1)


PROJECT = """\
cmake_minimum_required(VERSION 3.14)
project(probe C)
add_executable(probe {sources})
"""


def test_a_build_in_ci_mode_prints_progress_from_the_log_path_to_the_end(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    names = [f"part{i}.c" for i in range(12)]
    for i, name in enumerate(names):
        (source / name).write_text(f"int part{i}(void) {{ return {i}; }}\n")
    (source / "main.c").write_text("int main(void) { return 0; }\n")
    (source / "CMakeLists.txt").write_text(PROJECT.format(sources=" ".join(names + ["main.c"])))
    log = tmp_path / "build.log"
    script = (
        "import os, sys\n"
        "from generator.servers import llama_cpp\n"
        f"steps = [['cmake', '-S', {str(source)!r}, '-B', {str(tmp_path / 'build')!r}],\n"
        f"         ['cmake', '--build', {str(tmp_path / 'build')!r}, '--parallel', str(llama_cpp.build_jobs()), '--target', 'probe']]\n"
        f"llama_cpp.run_build(steps, __import__('pathlib').Path({str(log)!r}), dict(os.environ), 'building probe')\n"
    )
    env = {**os.environ, "CI": "1", "PYTHONPATH": str(ROOT), "GOLDENS_PROGRESS_SECONDS": "0.05"}
    env.pop("GOLDENS_BUILD_JOBS", None)
    env.pop("CMAKE_BUILD_PARALLEL_LEVEL", None)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # nothing a script reads
    lines = result.stderr.splitlines()
    assert lines[0] == f"building probe: started (log: {log})"
    assert lines[-1].startswith("building probe: done in ")
    assert "\r" not in result.stderr and "\x1b" not in result.stderr  # plain lines, not a live one
    steps = [line for line in lines if "compile step" in line]
    assert steps, lines
    assert any(f"{len(os.sched_getaffinity(0))}" in line for line in log.read_text().splitlines()
               if line.startswith("$ cmake --build"))
    assert (tmp_path / "build" / "probe").exists()


def test_a_failed_build_names_its_log_in_one_error(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "bad.c").write_text("this is not C\n")
    (source / "CMakeLists.txt").write_text(PROJECT.format(sources="bad.c"))
    log = tmp_path / "build.log"
    steps = [["cmake", "-S", str(source), "-B", str(tmp_path / "build")],
             ["cmake", "--build", str(tmp_path / "build"), "--target", "probe"]]
    with pytest.raises(GoldensError, match=rf"building probe failed \(cmake --build exit \d+\); log {log}"):
        llama_cpp.run_build(steps, log, dict(os.environ), "building probe")
