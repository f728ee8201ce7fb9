"""The committed matrix passes its own gate, and a sharded run merges into what one run writes.

Both run real servers: the whole gate over every engine of models.yaml on the session's pool
(tests/conftest.py), model by model, and `goldens check --shard K/3` as three processes over minijinja, a
managed llama-server and a managed vLLM on two models, merged by `goldens report merge`.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import CONFIG, GOLDENS, ROOT, server_of

from generator.config import engine_registry
from generator.replay.running import check
from generator.replay.reporting import junit, markdown_report, terminal

pytestmark = pytest.mark.integration  # managed llama-server and vLLM, whole gates

def _kinds(model) -> list[str]:
    """The kinds of the model's managed servers (the registry's)."""
    return sorted({info.server.kind for info in map(engine_registry.lookup, model.engines)
                   if info.server is not None and info.server.per_model})


@pytest.mark.parametrize("model", [pytest.param(m.name, marks=[pytest.mark.server(kind, m.name) for kind in _kinds(m)])
                                   for m in CONFIG.models.values()])
def test_the_committed_matrix_passes_its_own_gate_over_every_engine(model, pool):
    """What `goldens check` (and `make check`) runs on a fresh clone, one model at a time as
    check runs it: every engine the model lists, the serving path confirmed. Exit 0, and every
    report counts the same. Marked, so it runs in the window where the suite's other tests of
    the model hold its servers (one vLLM at a time, never two); taken from the session's pool
    first, so they are the session's and the run leaves them up for those tests."""
    for kind in _kinds(CONFIG.models[model]):
        server_of(pool, kind, model)
    held = pool.running()
    results = check.run(CONFIG, GOLDENS, models=(model,), jobs=4, pool=pool)
    assert held <= pool.running()  # the session's servers stay up for its other tests
    summary = results.summary
    problems = [f"{o.case} [{o.column}]: {o.kind}: {o.detail[:300]}" for o in summary.outcomes
                if o.status not in ("match", "both-refuse", "known", "count")]
    assert summary.exit_code() == 0, "\n".join(problems)
    assert not problems
    assert {o.engine for o in summary.verdicts} == set(CONFIG.models[model].engines)
    assert {o.case.split("/")[0] for o in summary.outcomes} == {model}
    assert results.plan.replays == len(summary.verdicts)
    line = summary.line()
    assert terminal.terminal(summary)[-1] == line
    assert markdown_report.markdown(summary).splitlines()[0] == f"**goldens check: passed** · {line}"
    tests = sum(int(n) for n in re.findall(r' tests="(\d+)"', junit.junit_xml(summary)))
    assert tests == len(summary.outcomes)
    # the reviewed stand-in findings are known, in their own column
    findings = {(o.case, o.engine) for o in summary.findings}
    assert all(o.status == "known" for o in summary.findings)
    # the managed vLLM is its render server, read through its render endpoint: no stand-in to
    # confirm, so qwen3's reviewed /tokenize entries (agentic-turn) are a --url server's only
    assert not any(engine == "vllm" for _, engine in findings)


def _goldens(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator.cli", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)


def _without_timings(text: str) -> str:
    return re.sub(r' (time|timestamp)="[^"]*"', r' \1=""', text)


def test_three_shard_processes_merge_into_the_unsharded_reports(tmp_path):
    """Managed llama-server and vLLM, and minijinja, over qwen3 (both variants) and gemma4 (which
    lists neither server): four (model, engine) groups, each on one of three shards, so every
    shard process starts only the servers of its own groups."""
    selection = ["--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "minijinja",
                 "--engine", "llama-server", "--engine", "vllm", "--model", "qwen3", "--model", "gemma4",
                 "--jobs", 2]
    one = _goldens("check", *selection, "--junit", tmp_path / "one.xml", "--report", tmp_path / "one.md")
    assert one.returncode == 0, one.stdout + one.stderr
    shards = []
    for k in (1, 2, 3):
        path = tmp_path / f"shard{k}.json"
        run = _goldens("check", *selection, "--shard", f"{k}/3", "--results", path)
        assert run.returncode == 0, run.stdout + run.stderr
        shards.append(path)
    merged = _goldens("report", "merge", *shards, "--goldens", GOLDENS, "--junit", tmp_path / "merged.xml",
                      "--report", tmp_path / "merged.md")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert (tmp_path / "merged.md").read_text() == (tmp_path / "one.md").read_text()
    assert _without_timings((tmp_path / "merged.xml").read_text()) == _without_timings((tmp_path / "one.xml").read_text())
    assert merged.stdout.splitlines()[-1] == one.stdout.splitlines()[-1]
    suites = re.findall(r'<testsuite name="goldens\.([^"]+)"', (tmp_path / "merged.xml").read_text())
    # every engine, in the unsharded order (vLLM's render server has no stand-in findings)
    assert suites == ["minijinja", "llama-server", "vllm"]

    missing = _goldens("report", "merge", shards[0], shards[1], "--goldens", GOLDENS)
    assert missing.returncode == 2
    assert "goldens: error: shard 3/3 missing" in missing.stderr
