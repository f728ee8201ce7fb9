"""Outcomes as data: the typed verdict of a stand-in finding, one Summary behind every report,
`check --results/--json`, `check --shard K/N` and `goldens report merge`.

The CLI runs replay the committed goldens through minijinja (no server) on the committed matrix;
the run over real servers in shards is tests/test_gate_matrix.py's.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDENS, ROOT, golden_of, one_line_error

from generator.cli import main
from generator.engines import Ids, Refused
from generator.replay.running import shard
from generator.replay.reporting import junit, markdown_report, results, terminal
from generator.replay.judging import divergence, ledger
from generator.replay.judging.outcome import Outcome
from generator.replay.judging.stand_in import judge_finding
from generator.replay.reporting.report import Summary

STAMP = dt.datetime(2026, 1, 15, tzinfo=dt.timezone.utc)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def check(*args):
    return invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "minijinja",
                  "--jobs", 2, *args)


def without_timings(text: str) -> str:
    """A JUnit report with its clock readings (time=, timestamp=) blanked."""
    return re.sub(r' (time|timestamp)="[^"]*"', r' \1=""', text)


# ------------------------------------------------------------------ a stand-in finding, judged

def entry(golden, ids, stand_in="/tokenize", refused=None) -> ledger.Entry:
    return ledger.Entry(golden.case, "vllm", "reviewed: drops reasoning_content", list(ids),
                        [str(i) for i in ids], None, Path("agentic-turn.vllm.stand-in.json"),
                        refused=refused, stand_in=stand_in)


def test_a_stand_in_finding_is_judged_against_its_stand_in_ledger_entry():
    golden = golden_of("qwen3/plain")
    short = Ids(golden.ids[:-3])
    finding = "vllm: /tokenize gives 22 tokens but /v1/chat/completions fed the model 25 tokens"
    # agreeing, nothing recorded: nothing to report
    assert judge_finding(golden, None, "vllm", "/tokenize", Ids(golden.ids), None) is None
    # a new disagreement fails the gate, as its own column
    new = judge_finding(golden, None, "vllm", "/tokenize", short, finding)
    assert (new.status, new.kind, new.stand_in, new.column, new.detail) == (
        "drift", "drift", "/tokenize", "vllm stand-in", finding)
    # reviewed: the stand-in still gives exactly the recorded ids
    known = judge_finding(golden, entry(golden, short), "vllm", "/tokenize", short, finding)
    assert (known.status, known.kind, known.reason) == ("known", "known", "reviewed: drops reasoning_content")
    # the stand-in moved from what was reviewed: where, token by token
    other = Ids(golden.ids[:-4] + [7, 7])
    moved = judge_finding(golden, entry(golden, short), "vllm", "/tokenize", other, finding)
    assert (moved.status, moved.kind) == ("drift", "ledger-moved")
    assert moved.divergence.index == len(golden.ids) - 4
    # fixed upstream: the stand-in agrees with serving again, the entry is stale
    fixed = judge_finding(golden, entry(golden, short), "vllm", "/tokenize", Ids(golden.ids), None)
    assert (fixed.status, fixed.kind) == ("drift", "ledger-fixed")
    assert "agrees with the serving path" in fixed.detail
    # a reviewed refusal of the stand-in
    refused = judge_finding(golden, entry(golden, [], refused="400"), "vllm", "/tokenize", Refused("400"),
                            "vllm: /tokenize refused (400) but /v1/chat/completions fed 25 tokens")
    assert refused.status == "known" and refused.refused


# ------------------------------------------------------------------ one Summary, every report

def sample() -> list[Outcome]:
    ids = list(range(10, 30))
    moved = ids[:5] + [1] + ids[6:]
    div = divergence.diverge(ids, [f"t{i}" for i in ids], None, moved, [f"t{i}" for i in moved], None)
    return [
        Outcome("qwen3/plain", "vllm", "match", version="0.32.0"),
        Outcome("qwen3/agentic-turn", "vllm", "match", version="0.32.0"),
        Outcome("qwen3/agentic-turn", "vllm", "known", "drops reasoning_content", reason="drops reasoning_content",
                stand_in="/tokenize", version="0.32.0"),
        Outcome("qwen3/tools", "vllm", "drift", "moved from its ledger entry: x", divergence=div,
                kind="ledger-moved", version="0.32.0"),
        Outcome("qwen3/tools", "vllm", "drift", "vllm: /tokenize gives 20 tokens but ...", stand_in="/tokenize",
                version="0.32.0"),
        Outcome("qwen3/plain", "minijinja", "error", "minijinja: boom"),
    ]


def test_terminal_markdown_and_junit_count_from_one_summary():
    summary = Summary(sample(), notes=["a note"])
    line = summary.line()
    assert line == ("4 checked: 2 rendered and match, 0 both refuse, 0 known divergence, 1 drift, 1 error; 2 stand-in findings "
                    "(stand-in endpoint disagreeing with serving: 1 known, 1 drift)")
    assert terminal.terminal(summary)[-1] == line
    page = markdown_report.markdown(summary)
    assert page.splitlines()[0] == f"**goldens check: failed (1 error, 2 drift)** · {line}"
    tree = ET.fromstring(junit.junit_xml(summary, 6.0, STAMP, "host"))
    suites = {s.get("name"): s for s in tree}
    assert list(suites) == ["goldens.vllm", "goldens.vllm stand-in", "goldens.minijinja"]
    assert sum(int(s.get("tests")) for s in tree) == len(summary.outcomes)
    assert [(s.get("failures"), s.get("errors")) for s in tree] == [("1", "0"), ("1", "0"), ("0", "1")]
    assert [f.get("message") for f in tree.iter("failure")][0] == "drift at token 5 (ledger entry moved)"
    assert summary.exit_code() == 2
    assert Summary(sample()[:3]).exit_code() == 0  # a reviewed stand-in finding passes
    assert Summary(sample()[:5]).exit_code() == 1  # a new finding fails, as a drift
    assert Summary(sample()[2:3]).exit_code() == 2  # findings alone judged no verdict


def test_the_results_document_has_stable_keys_and_the_summary_s_counts():
    run = results.Results(results.Plan(2, 6, "f" * 64), [
        results.Group(0, "qwen3", "vllm", sample()[:5], 3.0), results.Group(1, "qwen3", "minijinja", sample()[5:], 1.0)],
        notes=["a note"], elapsed=4.0, shard=(1, 1))
    text = results.dumps(run)
    data = json.loads(text)
    assert list(data) == ["schema", "format", "tool", "plan", "shard", "exit_code", "verdict", "summary", "counts",
                          "notes", "versions", "elapsed", "coverage", "refusals", "groups"]
    assert data["coverage"] is None  # check --coverage fills it
    assert data["exit_code"] == 2 and data["versions"] == {"vllm": "0.32.0"}
    assert data["counts"]["findings"]["known"] == 1 and data["counts"]["verdicts"]["drift"] == 1
    assert data["summary"] == run.summary.line() and data["shard"] == {"index": 1, "count": 1}
    assert list(data["groups"][0]["outcomes"][3]) == [
        "case", "engine", "status", "kind", "detail", "level", "refused", "unreachable", "version", "reason",
        "stand_in", "cause", "edit", "advice", "axis", "divergence", "class"]


def test_results_files_load_back_to_the_same_reports(tmp_path):
    run = results.Results(results.Plan(2, 6, "f" * 64), [
        results.Group(0, "qwen3", "vllm", sample()[:5], 3.0), results.Group(1, "qwen3", "minijinja", sample()[5:], 1.0)],
        notes=["a note"], elapsed=4.0)
    path = tmp_path / "r.json"
    path.write_text(results.dumps(run), encoding="utf-8")
    back = results.load(path)
    assert back.outcomes == run.outcomes
    assert markdown_report.markdown(back.summary) == markdown_report.markdown(run.summary)
    assert junit.junit_xml(back.summary, 4.0, STAMP, "h") == junit.junit_xml(run.summary, 4.0, STAMP, "h")
    path.write_text('{"tool": "something else"}', encoding="utf-8")
    with pytest.raises(Exception, match="not a goldens check results file"):
        results.load(path)


# ------------------------------------------------------------------ the partition

GROUPS = [(f"m{i % 7} {'vllm' if i % 5 == 0 else 'minijinja'}", 5 + (i * 37) % 23) for i in range(40)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 41])
def test_shards_cover_every_group_exactly_once_deterministically(n):
    parts = shard.partition(GROUPS, n)
    assert len(parts) == n
    flat = [i for part in parts for i in part]
    assert sorted(flat) == list(range(len(GROUPS)))  # every group, exactly once
    assert all(part == sorted(part) for part in parts)  # plan order within a shard
    assert shard.partition(list(GROUPS), n) == parts  # the same input, the same partition
    if n <= len(GROUPS):
        loads = [sum(shard.estimate(GROUPS[i][0].split(" ")[1], GROUPS[i][1]) for i in part) for part in parts]
        biggest = max(shard.estimate(k.split(" ")[1], r) for k, r in GROUPS)
        assert max(loads) - min(loads) <= biggest  # greedy longest-first: within one group's cost


def test_measured_durations_decide_the_balance():
    groups = [("a minijinja", 10), ("b minijinja", 10), ("c minijinja", 10)]
    assert shard.partition(groups, 2) == [[0, 2], [1]]  # equal estimates
    assert shard.partition(groups, 2, {"a minijinja": 100.0, "b minijinja": 1.0, "c minijinja": 1.0}) == [[0], [1, 2]]


def test_shard_and_durations_bad_input(tmp_path):
    for text in ("0/3", "4/3", "3", "a/b", "1/0"):
        with pytest.raises(Exception, match="--shard"):
            shard.parse(text)
    bad = tmp_path / "d.json"
    bad.write_text('{"qwen3 vllm": -1}', encoding="utf-8")
    assert "expected an object" in one_line_error(check("--model", "qwen3", "--shard", "1/2", "--durations", bad))
    assert "--durations balances --shard" in one_line_error(check("--model", "qwen3", "--durations", bad))


# ------------------------------------------------------------------ the CLI: shards, merge, json

MODELS = ("--model", "qwen3", "--model", "llama3", "--model", "phi3.5")


@pytest.mark.slow
def test_shards_merged_write_what_one_run_writes_and_a_missing_shard_is_2(tmp_path):
    one = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "minijinja",
                 *MODELS, "--junit", tmp_path / "one.xml", "--report", tmp_path / "one.md",
                 "--results", tmp_path / "one.json", "--store-durations", tmp_path / "durations.json")
    assert one.exit_code == 0, (one.stdout, one.stderr)
    durations = json.loads((tmp_path / "durations.json").read_text())
    assert sorted(durations) == ["llama3 minijinja", "phi3.5 minijinja", "qwen3 minijinja"]
    shards = []
    for k in (1, 2, 3):  # separate processes, each with its own hash seed: the partition must not care
        path = tmp_path / f"shard{k}.json"
        run = subprocess.run([sys.executable, "-m", "generator.cli", "check", "--config", str(ROOT / "models.yaml"),
                              "--goldens", str(GOLDENS), "--engine", "minijinja", *MODELS, "--shard", f"{k}/3",
                              "--durations", str(tmp_path / "durations.json"), "--results", str(path)],
                             cwd=ROOT, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PYTHONHASHSEED": str(k * 7919)})
        assert run.returncode == 0, (run.stdout, run.stderr)
        shards.append(path)
    groups = [[g["model"] for g in json.loads(p.read_text())["groups"]] for p in shards]
    assert sorted(m for g in groups for m in g) == ["llama3", "phi3.5", "qwen3"] and all(len(g) == 1 for g in groups)
    merged = invoke("report", "merge", *shards, "--goldens", GOLDENS, "--junit", tmp_path / "merged.xml",
                    "--report", tmp_path / "merged.md")
    assert merged.exit_code == 0, (merged.stdout, merged.stderr)
    assert (tmp_path / "merged.md").read_text() == (tmp_path / "one.md").read_text()
    assert without_timings((tmp_path / "merged.xml").read_text()) == without_timings((tmp_path / "one.xml").read_text())
    assert merged.stdout.splitlines()[-1] == one.stdout.splitlines()[-1]

    missing = invoke("report", "merge", shards[0], shards[2], "--goldens", GOLDENS, "--report", tmp_path / "m.md")
    assert missing.exit_code == 2
    assert "goldens: error: shard 2/3 missing" in missing.stderr
    assert "not merged: shard 2/3 missing" in (tmp_path / "m.md").read_text()
    twice = invoke("report", "merge", shards[0], shards[0], shards[1], shards[2], "--goldens", GOLDENS)
    assert twice.exit_code == 2 and "shard 1/3 given twice" in twice.stderr
    other = invoke("report", "merge", shards[0], tmp_path / "one.json", "--goldens", GOLDENS)
    assert other.exit_code == 2 and "different shard counts" in other.stderr


def test_an_empty_shard_says_so_and_passes_only_because_the_partition_is_empty(tmp_path):
    run = check("--model", "qwen3", "--shard", "2/2", "--results", tmp_path / "r.json")
    assert run.exit_code == 0, (run.stdout, run.stderr)
    assert run.stdout.strip() == ("nothing to check: shard 2/2 is empty (the partition gives all 1 "
                                  "(model, engine) groups to other shards)")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["groups"] == [] and data["shard"] == {"index": 2, "count": 2} and data["plan"]["groups"] == 1
    full = check("--model", "qwen3", "--shard", "1/2", "--results", tmp_path / "s1.json")
    assert full.exit_code == 0
    merged = invoke("report", "merge", tmp_path / "s1.json", tmp_path / "r.json", "--goldens", GOLDENS)
    assert merged.exit_code == 0, merged.stderr


def test_check_json_is_one_document_on_stdout_with_the_results_data(tmp_path):
    run = check("--model", "phi3.5", "--json", "--results", tmp_path / "r.json")
    assert run.exit_code == 0, (run.stdout, run.stderr)
    data = json.loads(run.stdout)  # nothing else on stdout
    saved = json.loads((tmp_path / "r.json").read_text())
    for item in (data, saved):
        item["elapsed"] = 0
        for group in item["groups"]:
            group["seconds"] = 0
    assert data == saved
    assert data["exit_code"] == 0 and data["verdict"] == "passed"
    outcomes = data["groups"][0]["outcomes"]
    assert {o["engine"] for o in outcomes} == {"minijinja"} and {o["kind"] for o in outcomes} <= {"match", "both-refuse", "known"}
    assert data["summary"] in run.stderr  # the terminal report went to stderr


def test_a_failed_shard_makes_the_merge_2_and_is_named_and_the_step_summary_is_the_report(tmp_path):
    plan = results.Plan(2, 2, "e" * 64)
    good = results.Results(plan, [results.Group(0, "qwen3", "minijinja", [Outcome("qwen3/plain", "minijinja", "match")])],
                           shard=(1, 2))
    bad = results.Results(plan, [results.Group(1, "qwen3", "vllm", [Outcome("qwen3/plain", "vllm", "error",
                                                                            "vllm unavailable for qwen3: boom")])],
                          shard=(2, 2))
    paths = []
    for name, run in (("a.json", good), ("b.json", bad)):
        paths.append(tmp_path / name)
        paths[-1].write_text(results.dumps(run), encoding="utf-8")
    step = tmp_path / "step.md"
    merged = CliRunner().invoke(main, ["report", "merge", *map(str, paths), "--goldens", str(GOLDENS), "--report",
                                       str(tmp_path / "m.md"), "--step-summary"],
                                env={"GITHUB_STEP_SUMMARY": str(step)})
    assert merged.exit_code == 2, (merged.stdout, merged.stderr)
    assert f"goldens: error: shard 2/2 ({paths[1]}) could not judge: failed (1 error)" in merged.stderr
    assert "goldens: error: [vllm] vllm unavailable for qwen3: boom (qwen3/plain)" in merged.stderr
    assert step.read_text(encoding="utf-8") == (tmp_path / "m.md").read_text(encoding="utf-8") + "\n"
    annotations = [line for line in merged.stderr.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 1 and "qwen3/plain [vllm]" in annotations[0]  # on the error's golden
    both = invoke("report", "merge", paths[0], "--goldens", GOLDENS)
    assert both.exit_code == 2 and "shard 2/2 missing" in both.stderr
    unset = CliRunner().invoke(main, ["report", "merge", str(paths[0]), "--step-summary"], env={"GITHUB_STEP_SUMMARY": ""})
    assert "GITHUB_STEP_SUMMARY is not set" in one_line_error(unset)


@pytest.mark.parametrize("field, value, needle", [
    ("case", "qwen3/plain\n::error file=x::forged", "is not a case id"),
    ("status", "bogus", "is not a verdict goldens gives"),
    ("kind", "drift", "is not a verdict goldens gives"),  # a drift's kind under a match's status
    ("engine", "transformers\r\n", "is not an engine label"),
    ("refused", "yes", "refused is not true or false"),
])
def test_report_merge_validates_what_a_results_file_says(tmp_path, field, value, needle):
    """Issue 34: a case id with a newline printed a raw `::error` line under GitHub Actions and
    an unknown status `bogus` passed the gate."""
    run = check("--model", "qwen3", "--results", tmp_path / "r.json")
    assert run.exit_code == 0, run.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    data["groups"][0]["outcomes"][0][field] = value
    (tmp_path / "r.json").write_text(json.dumps(data))
    merged = invoke("report", "merge", tmp_path / "r.json", "--goldens", GOLDENS)
    line = one_line_error(merged)
    assert "a malformed results file" in line and needle in line and "::error file" not in merged.stdout


@pytest.fixture(scope="module")
def qwen3_results(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("plan") / "r.json"
    run = check("--model", "qwen3", "--model", "llama3", "--results", path)
    assert run.exit_code == 0, run.stderr
    return json.loads(path.read_text())


def _removed(data, n):
    del data["groups"][0]["outcomes"][:n]


def _added(data, n):
    extra = dict(data["groups"][0]["outcomes"][0], case="qwen3/not-in-the-matrix")
    data["groups"][0]["outcomes"].append(extra)


def _renamed(data, n):
    data["groups"][0]["outcomes"][n]["case"] = "qwen3/plain-renamed"


def _moved(data, n):
    outcomes = data["groups"][0]["outcomes"]
    outcomes[0], outcomes[n] = outcomes[n], outcomes[0]


def _swapped_groups(data, n):
    data["groups"][0]["outcomes"], data["groups"][1]["outcomes"] = data["groups"][1]["outcomes"], data["groups"][0]["outcomes"]


@pytest.mark.parametrize("edit, n, needle", [
    (_removed, 10, "cases judged, but the plan replays"),
    (_removed, 1, "cases judged, but the plan replays"),
    (_added, 1, "cases judged, but the plan replays"),
    (_renamed, 3, "are not the plan's"),
    (_moved, 5, "are not the plan's"),
    (_swapped_groups, 0, "not the plan's"),
])
def test_report_merge_checks_the_outcomes_against_the_plan(tmp_path, qwen3_results, edit, n, needle):
    """Issue 44: a shard with 10 outcomes removed, a case not in the matrix added, or a case
    relabelled merged with exit 0. The plan's fingerprint names every group's cases, in order."""
    data = json.loads(json.dumps(qwen3_results))
    edit(data, n)
    (tmp_path / "r.json").write_text(json.dumps(data))
    merged = invoke("report", "merge", tmp_path / "r.json", "--goldens", GOLDENS)
    assert merged.exit_code == 2, (merged.stdout, merged.stderr)
    assert needle in merged.stderr, merged.stderr
    (tmp_path / "ok.json").write_text(json.dumps(qwen3_results))
    assert invoke("report", "merge", tmp_path / "ok.json", "--goldens", GOLDENS).exit_code == 0
