"""`goldens bisect` over real releases whose answer is known.

llama.cpp: phi3.5/prefill renders '<|assistant|>' intact on b9093 and broken
('<|endoftext|>assistant|>') from b9246 on, which `goldens bisect --good 9093 --bad 10429` found in
9 builds (docs/findings.md, "What differs between llama.cpp builds"); the test bisects the three published
builds around it (b9113 b9246 b9247), so a fresh machine builds one release cold and its
neighbours mostly from ccache; 9101..9247 (interior b9113 and b9246) is bisected with --jobs 1
and --jobs 2, which must find the same release in 3 rounds and 2.
Transformers: gpt-oss/agentic-turn keeps its analysis channel from 5.21.0 on, where the release
began copying reasoning_content into `thinking`.
"""

from __future__ import annotations

import math
import re
import shutil

import pytest
from click.testing import CliRunner
from conftest import ROOT, one_line_error

from generator.cli import main

CONFIG = str(ROOT / "models.yaml")

LLAMA_GOOD, LLAMA_FIRST, LLAMA_BAD = 9113, 9246, 9247  # consecutive published builds


def bisect(*args: str):
    return CliRunner().invoke(main, ["bisect", "--config", CONFIG, *args])


def tried(output: str) -> list[str]:
    """The release column of each line a bisect printed for a release it tried."""
    return re.findall(r"^\s+(b?\d[\w.]*)\s+(?:same as good|changed)", output, re.M)


@pytest.mark.integration
def test_llama_server_bisect_finds_the_known_build_and_repeats_from_cache():
    first = bisect("--engine", "llama-server", "--good", str(LLAMA_GOOD), "--bad", str(LLAMA_BAD),
                   "--case", "phi3.5/prefill")
    assert first.exit_code == 0, first.output
    assert f"first changed release: b{LLAMA_FIRST}" in first.stdout
    assert tried(first.stdout) == ["b9113", "b9247", "b9246"]  # both ends, then the one midpoint
    assert len(tried(first.stdout)) <= math.ceil(math.log2(3)) + 2
    assert "first divergence: phi3.5/prefill: drift at token" in first.stdout
    assert "'<|assistant|>'" in first.stdout  # the good side's intact turn header
    again = bisect("--engine", "llama-server", "--good", str(LLAMA_GOOD), "--bad", str(LLAMA_BAD),
                   "--case", "phi3.5/prefill")
    assert again.exit_code == 0 and tried(again.stdout) == tried(first.stdout)
    lines = [line for line in again.stdout.splitlines() if re.match(r"^\s+b\d+\s+(same as good|changed)", line)]
    assert len(lines) == 3 and all(line.rstrip().endswith("cached") for line in lines), again.stdout  # nothing rebuilt


@pytest.mark.integration
def test_transformers_bisect_finds_the_release_that_aliases_reasoning():
    result = bisect("--engine", "transformers", "--good", "5.20.1", "--bad", "5.22.0",
                    "--case", "gpt-oss/agentic-turn")
    assert result.exit_code == 0, result.output
    assert "first changed release: 5.21.0 (the one before it: 5.20.2)" in result.stdout
    assert "drift at token 166 (205 vs 225 tokens)" in result.stdout
    assert len(tried(result.stdout)) <= math.ceil(math.log2(5)) + 2  # 5.20.1 5.20.2 5.21.0 5.21.1 5.22.0
    backwards = bisect("--engine", "transformers", "--good", "5.22.0", "--bad", "5.20.1",
                       "--case", "gpt-oss/agentic-turn")  # the newer release is the good one
    assert backwards.exit_code == 0, backwards.output
    assert ("last release that differs from the good 5.22.0, going back: 5.20.2 (the one after it, which "
            "agrees: 5.21.0)") in backwards.stdout



def rounds(output: str) -> int:
    (count,) = re.findall(r"^(\d+) rounds, \d+ releases tried, \d+ s wall", output, re.M)
    return int(count)


@pytest.mark.integration
def test_transformers_bisect_with_two_jobs_finds_the_same_release_in_fewer_rounds():
    """5.20.1 5.20.2 5.21.0 5.21.1 5.22.0: one job tries the ends, then 5.21.0, then 5.20.2 (3
    rounds); two jobs try the ends, then 5.20.2 and 5.21.0 at once (2 rounds)."""
    args = ("--engine", "transformers", "--good", "5.20.1", "--bad", "5.22.0", "--case", "gpt-oss/agentic-turn")
    one, two = bisect(*args, "--jobs", "1"), bisect(*args, "--jobs", "2")
    for result in (one, two):
        assert result.exit_code == 0, result.output
        assert "first changed release: 5.21.0 (the one before it: 5.20.2)" in result.stdout
    assert (rounds(one.stdout), rounds(two.stdout)) == (3, 2)
    assert tried(one.stdout) == ["5.20.1", "5.22.0", "5.21.0", "5.20.2"]
    assert tried(two.stdout) == ["5.20.1", "5.22.0", "5.20.2", "5.21.0"]


@pytest.mark.integration
def test_llama_server_bisect_with_two_jobs_finds_the_same_build_in_fewer_rounds():
    """b9101 b9113 b9246 b9247 (consecutive published builds): one job tries the ends, then b9113,
    then b9246 (3 rounds); two jobs try the ends, then b9113 and b9246 at once (2 rounds)."""
    args = ("--engine", "llama-server", "--good", "9101", "--bad", str(LLAMA_BAD), "--case", "phi3.5/prefill")
    one, two = bisect(*args, "--jobs", "1"), bisect(*args, "--jobs", "2")
    for result in (one, two):
        assert result.exit_code == 0, result.output
        assert f"first changed release: b{LLAMA_FIRST} (the one before it: b{LLAMA_GOOD}); 4 releases tried" \
            in result.stdout
        assert tried(result.stdout) == ["b9101", "b9247", "b9113", "b9246"]
    assert (rounds(one.stdout), rounds(two.stdout)) == (3, 2)
    assert re.search(r"^3 rounds, 4 releases tried, \d+ s wall", one.stdout, re.M), one.stdout
    assert re.search(r"^2 rounds, 4 releases tried, \d+ s wall", two.stdout, re.M), two.stdout
    assert "4 published releases from b9101 to b9247, 1 case(s); 1 release(s) at a time, at most 3 rounds" \
        in one.stdout
    assert "4 published releases from b9101 to b9247, 1 case(s); 2 release(s) at a time, at most 2 rounds" \
        in two.stdout


def test_the_range_is_split_jobs_plus_one_ways():
    from generator.replay.releases.bisect import points

    assert points(0, 4, 1) == [2] and points(0, 4, 2) == [1, 2] and points(0, 46, 3) == [11, 23, 34]
    assert points(3, 5, 4) == [4] and points(3, 4, 2) == []


@pytest.mark.integration
def test_bisect_exits_1_when_good_and_bad_agree():
    """b9246 and b9247 give the same answer on every qwen3 and phi3.5 case llama-server is asked,
    both axes (measured)."""
    from conftest import CONFIG

    from generator.config.cases import all_cases, replays

    asked = sum(len([c for c in all_cases(CONFIG.models[m]) if replays(c, "llama-server", CONFIG.models[m])])
                for m in ("qwen3", "phi3.5"))
    result = bisect("--engine", "llama-server", "--good", str(LLAMA_FIRST), "--bad", str(LLAMA_BAD),
                    "--model", "qwen3", "--model", "phi3.5")
    assert result.exit_code == 1, result.output
    assert f"b9246 and b9247 agree on all {asked} case(s)" in result.stdout
    assert tried(result.stdout) == ["b9246", "b9247"]


BAD_INPUT = {
    "unpublished-good": (["--engine", "llama-server", "--good", "10430", "--bad", "11434"],
                         ["build 10430 was never published", "b10429, b10435"]),
    "unpublished-transformers": (["--engine", "transformers", "--good", "5.20.9", "--bad", "5.24.0"],
                                 ["transformers 5.20.9 was never published", "5.20.2, 5.21.0"]),
    "same-release": (["--engine", "llama-server", "--good", "b10429", "--bad", "10429"],
                     ["--good and --bad are the same release"]),
    "vllm-before-render": (["--engine", "vllm", "--good", "0.18.1", "--bad", "0.32.0"],
                           ["vllm 0.18.1 has no render server (the first release with one is 0.19.0)"]),
    "zero-jobs": (["--engine", "llama-server", "--good", "10429", "--bad", "11434", "--jobs", "0"],
                  ["--jobs"]),
    "versioned-engine": (["--engine", "llama-server@10429", "--good", "10429", "--bad", "11434"],
                         ["bisect takes the versions from --good and --bad"]),
    "unknown-case": (["--engine", "llama-server", "--good", "10429", "--bad", "11434", "--case", "qwen3/nope"],
                     ["unknown case 'qwen3/nope'"]),
    "model-without-engine": (["--engine", "llama-server", "--good", "10429", "--bad", "11434",
                              "--model", "gemma4"], ["gemma4 does not list llama-server"]),
    "malformed-build": (["--engine", "llama-server", "--good", "latest", "--bad", "11434"],
                        ["a llama.cpp build is a number"]),
}


NEEDS_THE_INDEX = {"unpublished-good", "unpublished-transformers", "vllm-before-render"}  # the index names the releases


@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.integration] if case in NEEDS_THE_INDEX else [])
                                  for case in sorted(BAD_INPUT)])
def test_bad_bisect_input_is_one_line_exit_2(case, tmp_path):
    args, needles = BAD_INPUT[case]
    if case == "model-without-engine":  # every committed model lists llama-server: gemma4 here does not
        text = (ROOT / "models.yaml").read_text(encoding="utf-8")
        at = text.index("\n  gemma4:")
        engines = text.index("engines: [", at)
        end = text.index("]", engines)
        listed = [e.strip() for e in text[engines + len("engines: ["):end].split(",") if e.strip() != "llama-server"]
        (tmp_path / "models.yaml").write_text(text[:engines] + f"engines: [{', '.join(listed)}" + text[end:], encoding="utf-8")
        shutil.copytree(ROOT / "requests", tmp_path / "requests")  # a link out of the folder is refused
        args = [*args, "--config", str(tmp_path / "models.yaml")]  # the last --config is the one read
    line = one_line_error(bisect(*args))
    for needle in needles:
        assert needle in line, (needle, line)


class _Line:
    """A version line that records the share of the cores each `ready` was given."""

    def __init__(self, cached: set[str]):
        self.built: dict[str, int | None] = {}
        self._cached = cached

    def cached(self, version: str) -> bool:
        return version in self._cached

    def ready(self, version: str, jobs: int | None = None) -> tuple[float, str]:
        if version in self._cached:
            return 0.0, "cached"
        self.built[version] = jobs
        return 1.0, "built"


@pytest.mark.parametrize("cores", [1, 2, 3, 8])
def test_builds_of_one_round_split_the_cores_and_a_cached_release_takes_none(monkeypatch, cores):
    from generator.replay.releases import releases as search

    monkeypatch.setenv("GOLDENS_BUILD_JOBS", str(cores))
    both = _Line(cached=set())
    monkeypatch.setattr(search, "line", lambda engine: both)
    ready = search.ready_all("llama-server", ["9113", "9246"], 2)
    assert both.built == {"9113": max(1, cores // 2), "9246": max(1, cores // 2)}
    assert ready == {"9113": (1.0, "built"), "9246": (1.0, "built")}
    one = _Line(cached={"9113"})
    monkeypatch.setattr(search, "line", lambda engine: one)
    ready = search.ready_all("llama-server", ["9113", "9246"], 2)
    assert one.built == {"9246": None}  # the one build of the round: every core (build_jobs())
    assert ready == {"9113": (0.0, "cached"), "9246": (1.0, "built")}


@pytest.mark.integration
def test_two_real_builds_of_one_round_each_compile_on_their_share_of_the_cores(monkeypatch, tmp_path):
    """b9101 and b9113 made ready at once (as a --jobs 2 round does) into a temporary cache root
    with the machine's shared compiler cache: each build's log shows its compile on half the
    usable cores (at least one), and both binaries report their own build."""
    import os

    from generator.files import cache_dir
    from generator.replay.releases import releases as search
    from generator.engines.llama_server.llama_cpp import llama_server_version

    monkeypatch.setenv("CCACHE_DIR", os.environ.get("CCACHE_DIR") or str(cache_dir() / "ccache"))
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))
    monkeypatch.delenv("GOLDENS_BUILD_JOBS", raising=False)
    monkeypatch.delenv("CMAKE_BUILD_PARALLEL_LEVEL", raising=False)
    ready = search.ready_all("llama-server", ["9101", "9113"], 2)
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    for build in (9101, 9113):
        root = tmp_path / "llama.cpp" / f"b{build}"
        assert ready[str(build)][1].startswith("built (ccache served "), ready
        assert (f"$ cmake --build {root / 'build'} --parallel {share} --target llama-server"
                in (root / "build.log").read_text().splitlines())
        assert llama_server_version(root / "llama-server") == build
