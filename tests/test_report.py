"""`goldens check --junit/--report`: the CI gate's reports, exit codes and bad input.

Runs go through the transformers engine (no server) on copies of the committed goldens in a
tmp dir; the committed goldens are never edited.
"""

from __future__ import annotations

import json
import re
import threading
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CONFIG, ROOT, one_line_error, token_count

from generator import files
from generator.cli import main
from generator.config.cases import is_parse_case, matrix
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.reporting import destination, markdown_report
from generator.replay.judging import disputes, divergence
from generator.replay.reporting.junit import junit_xml
from generator.replay.reporting.report import Summary
from generator.replay.judging.outcome import Outcome
from generator.servers.process import free_port

transformers_version = version("transformers")

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$")
DECIMAL = re.compile(r"^-?\d+(\.\d+)?$")


def invoke(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])



def check(where: Path, *args):
    return invoke("check", "--config", where / "models.yaml", "--goldens", where / "goldens",
                  "--engine", "transformers", "--jobs", 4, *args)


def transformers_cases(models=()) -> list[str]:
    """The cases `check --engine transformers` judges: both axes, as its plan has them."""
    from generator.replay.running import check

    work = check.plan(CONFIG, ("transformers",), tuple(models))
    return [case for _, _, cases in check.groups(CONFIG, work) for case in cases]


# --------------------------------------------------------------- the common JUnit schema, checked

def assert_junit_schema(root: ET.Element) -> None:
    """What both the Ant JUnit.xsd ("windyroad") and Jenkins' junit-10.xsd require of a report."""
    assert root.tag == "testsuites" and not root.attrib
    for suite in root:
        assert suite.tag == "testsuite"
        for key in ("name", "package", "id", "tests", "failures", "errors", "time", "timestamp", "hostname"):
            assert suite.get(key), (key, suite.attrib)
        assert TIMESTAMP.match(suite.get("timestamp")), suite.get("timestamp")
        assert DECIMAL.match(suite.get("time"))
        children = [child.tag for child in suite]
        assert children[0] == "properties" and children[-2:] == ["system-out", "system-err"], children
        assert set(children[1:-2]) <= {"testcase"}, children
        for prop in suite.find("properties"):
            assert prop.tag == "property" and prop.get("name") and prop.get("value") is not None
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(1 for c in cases if c.find("failure") is not None)
        assert int(suite.get("errors")) == sum(1 for c in cases if c.find("error") is not None)
        for case in cases:
            assert case.get("name") and case.get("classname") and DECIMAL.match(case.get("time"))
            assert len(case) <= 1 and all(child.tag in ("failure", "error") for child in case)
            for child in case:
                assert child.get("type") and child.get("message") is not None


def tables(markdown: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every GFM table of a report, as (header cells, body rows)."""
    found, lines = [], markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            header, separator = lines[i], lines[i + 1]
            assert re.fullmatch(r"\|( -{3,} \|)+", separator), separator
            assert len(separator.split("|")) == len(header.split("|"))
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]])
            found.append(([c.strip() for c in header.strip("|").split("|")], rows))
    return found


def table(markdown: str) -> tuple[str, list[str], list[list[str]]]:
    """(verdict line, header cells, body rows) of the case x engine grid, folded at the end."""
    lines = markdown.splitlines()
    assert lines[1] == ""
    grids = [(header, rows) for header, rows in tables(markdown) if header[:2] == ["model", "shape"]]
    assert len(grids) == 1, grids
    return lines[0], *grids[0]


# ------------------------------------------------------------------------------- through the CLI

@pytest.mark.slow
def test_check_on_the_committed_goldens_writes_both_reports(workspace, tmp_path, snapshot):
    out_xml, out_md = tmp_path / "out" / "goldens.xml", tmp_path / "out" / "goldens.md"
    result = check(workspace, "--junit", out_xml, "--report", out_md)
    assert result.exit_code == 0, (result.stdout, result.stderr)

    root = ET.parse(out_xml).getroot()
    assert_junit_schema(root)
    (suite,) = root
    assert suite.get("name") == "goldens.transformers"
    listed = [f"{c.get('classname')}/{c.get('name')}" for c in suite.iter("testcase")]
    assert sorted(listed) == sorted(transformers_cases())
    assert suite.get("failures") == "0" and suite.get("errors") == "0"

    summary, header, rows = table(out_md.read_text(encoding="utf-8"))
    rows = [[m.removesuffix(" (surrogate)"), s, cell] for m, s, cell in rows]  # a family's row says what it is
    assert summary.startswith("**goldens check: passed**")
    refused = {case for case in listed if golden_file.read(
        golden_file.golden_path(workspace / "goldens", case)).outcome == "error"}
    # the reference's refusals: both refuse, never counted as a match (a reviewed list: a case the
    # reference starts or stops refusing is a snapshot update, `pytest --snapshot-update`)
    assert sorted(refused) == snapshot
    # Transformers' known divergences: the reviewed causes of its own parsers (parse cases), and the
    # cases whose references disagree where the review says the encoder is right (the template is wrong)
    known = {f"{m}/{s}" for m, s, cell in rows if cell.startswith("known divergence")}
    disputed = {case for case in listed if disputes.record(golden_file.read(
        golden_file.golden_path(workspace / "goldens", case))) is not None}
    assert known and all(is_parse_case(case) or case in disputed for case in known), sorted(known)
    assert (f"{len(listed)} checked: {len(listed) - len(refused) - len(known)} rendered and match, "
            f"{len(refused)} both refuse, {len(known)} known divergence, 0 drift, 0 error") in summary
    assert header == ["model", "shape", f"transformers ({transformers_version})"]  # the version it reported
    assert sorted(f"{m}/{s}" for m, s, _ in rows) == sorted(listed)
    assert {f"{m}/{s}" for m, s, cell in rows if cell == "both refuse"} == refused
    assert {cell for m, s, cell in rows if f"{m}/{s}" not in refused | known} == {"ok"}
    system_out = suite.find("system-out").text.splitlines()
    assert sorted(line.partition(" ")[0] for line in system_out if ": both refuse: " in line) == sorted(refused)
    assert not list(tmp_path.glob("out/.*"))  # no temp file left beside the reports


@pytest.mark.slow
def test_one_edited_token_is_drift_in_both_reports(workspace, tmp_path):
    path = golden_file.golden_path(workspace / "goldens", "qwen3/plain")
    item = golden_file.read(path)
    item.ids[5], item.pieces[5] = 12345, " tersely"
    files.atomic_write(path, golden_file.dumps(item))
    out_xml, out_md = tmp_path / "out.xml", tmp_path / "out.md"

    result = check(workspace, "--model", "qwen3", "--junit", out_xml, "--report", out_md)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "DRIFT qwen3/plain [transformers]: drift at token 5" in result.stdout

    root = ET.parse(out_xml).getroot()
    assert_junit_schema(root)
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [("qwen3", "plain")]
    failure = failed[0].find("failure")
    assert failure.get("message") == "drift at token 5"
    assert "»5:12345:' tersely'" in failure.text and "»5:50537:' terse'" in failure.text
    assert len(list(root.iter("testcase"))) == len(transformers_cases(["qwen3"]))

    text = out_md.read_text(encoding="utf-8")
    summary, _, rows = table(text)
    assert summary.startswith("**goldens check: failed (1 drift)**")
    by_case = {f"{m}/{s}": cell for m, s, cell in rows}
    assert by_case["qwen3/plain"] == "**drift at token 5**"
    # every other case ok but the one qwen3 case its template refuses (Mistral's thinking part):
    # both refuse is said as such, never "ok"
    assert {case: cell for case, cell in by_case.items() if cell != "ok" and "/parse/" not in case} == {
        "qwen3/plain": "**drift at token 5**", "qwen3/reasoning-history_think-chunk": "both refuse"}
    # the parse cases beside them: each passes as matching or as a reviewed parse cause
    parsed = {case: cell for case, cell in by_case.items() if "/parse/" in case}
    assert parsed and all(cell == "ok" or cell.startswith("known divergence (cause ") for cell in parsed.values())
    (look,) = [rows for header, rows in tables(text) if header[0] == "needs a look"]
    assert look == [["drift at token 5", "qwen3", "plain", "transformers", "`… 'You' ' are' [-' tersely'-] {+' terse'+}`"]]
    n = token_count("qwen3/plain")  # one token replaced: both sides keep the golden's length
    assert f"<details><summary>qwen3/plain · transformers: drift at token 5 ({n} vs {n} tokens)</summary>" in text


@pytest.mark.parametrize("args, expected", [
    (["--engine", "nope"], "unknown engine 'nope'"),
    (["--model", "nope"], "unknown model 'nope'"),
    (["--url", "llama-server=not a url"], "'not a url' is not an http(s) URL"),
    (["--url", "nope=http://127.0.0.1:8080"], "unknown engine 'nope'"),
    (["--url", "llama-server=http://127.0.0.1:9"], "cannot reach http://127.0.0.1:9"),
    (["--url", "llama-server=http://127.0.0.1:{port}"], "cannot reach http://127.0.0.1:{port}"),
])
def test_bad_input_is_one_line_exit_2_and_no_report(workspace, tmp_path, args, expected):
    port = free_port()
    args = [a.format(port=port) for a in args]
    out_xml, out_md = tmp_path / "out.xml", tmp_path / "out.md"
    line = one_line_error(check(workspace, *args, "--junit", out_xml, "--report", out_md))
    assert expected.format(port=port) in line
    assert not out_xml.exists() and not out_md.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


@pytest.mark.parametrize("edit, expected", [
    (lambda text: text[: len(text) // 2], "not valid JSON"),
    (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "tokens"}), "missing key 'tokens'"),
])
def test_a_golden_edited_into_bad_json_is_exit_2_naming_the_file(workspace, tmp_path, edit, expected):
    path = workspace / "goldens" / "qwen3" / "tools.json"
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    out_xml, out_md = tmp_path / "out.xml", tmp_path / "out.md"
    line = one_line_error(check(workspace, "--model", "qwen3", "--junit", out_xml, "--report", out_md))
    assert str(path) in line and expected in line
    assert not out_xml.exists() and not out_md.exists()


def test_report_destinations_are_checked_before_the_run(workspace, tmp_path):
    same = tmp_path / "same"
    assert "name the same file" in one_line_error(check(workspace, "--junit", same, "--report", same))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "is not a directory" in one_line_error(check(workspace, "--report", blocker / "out.md"))
    assert not same.exists()


@pytest.mark.slow
def test_two_runs_on_the_same_reports_never_leave_a_partial_file(workspace, tmp_path):
    import subprocess
    import sys

    out_xml, out_md = tmp_path / "shared.xml", tmp_path / "shared.md"
    command = [sys.executable, "-m", "generator.cli", "check", "--config", str(workspace / "models.yaml"),
               "--goldens", str(workspace / "goldens"), "--engine", "transformers", "--model", "gemma3",
               "--junit", str(out_xml), "--report", str(out_md)]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            for _ in range(2)]
    codes = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=600)
        codes.append(run.returncode)
        # the one that finds the reports claimed is refused; the other writes them whole
        assert run.returncode == 0 or (run.returncode == 2 and "another goldens check is writing" in stderr
                                       and len(stderr.splitlines()) == 1), (stdout, stderr)
    assert 0 in codes
    root = ET.parse(out_xml).getroot()
    assert_junit_schema(root)
    assert len(list(root.iter("testcase"))) == len(transformers_cases(["gemma3"]))
    assert table(out_md.read_text(encoding="utf-8"))[0].startswith("**goldens check: passed**")
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# ------------------------------------------------------------------------------ report builders

def drift(case="qwen3/plain", engine="llama-server", index=7, ledger=False) -> Outcome:
    div = divergence.diverge([1, 2, 3, 4, 5, 6, 7, 8], list("abcdefg|"), None,
                          [1, 2, 3, 4, 5, 6, 7, 9], None, None, decode=lambda ids: list("abcdefg`"))
    assert div.index == index
    detail = divergence.format_divergence(div, "reference", engine)
    if ledger:
        detail = "moved from its ledger entry: " + detail
    return Outcome(case, engine, "drift", detail, divergence=div, kind="ledger-moved" if ledger else "")


OUTCOMES = [
    Outcome("qwen3/plain", "transformers", "match"),
    drift(),
    Outcome("qwen3/tools", "transformers", "match"),
    Outcome("qwen3/tools", "llama-server", "known", "drops <think> | by design", reason="drops <think> | by design"),
    Outcome("gemma3/plain--x", "transformers", "error", "transformers: boom \x00\x1b here"),
    drift("gemma3/plain--x", "llama-server", ledger=True),
    Outcome("gemma3/tools", "vllm", "drift", "the reference refused (no) but vllm rendered 3 tokens"),
]


def test_junit_from_outcomes_has_suites_per_engine_failures_and_errors():
    text = junit_xml(Summary(OUTCOMES), elapsed=3.5)
    root = ET.fromstring(text.encode("utf-8"))
    assert_junit_schema(root)
    suites = {s.get("name"): s for s in root}
    assert list(suites) == ["goldens.transformers", "goldens.llama-server", "goldens.vllm"]
    llama = suites["goldens.llama-server"]
    assert (llama.get("tests"), llama.get("failures"), llama.get("errors")) == ("3", "2", "0")
    messages = [f.get("message") for f in llama.iter("failure")]
    assert messages == ["drift at token 7", "drift at token 7 (ledger entry moved)"]
    assert "known divergence: drops <think> | by design" in llama.find("system-out").text
    error = suites["goldens.transformers"].find("testcase[@name='plain--x']/error")
    assert error.get("type") == "error" and "boom \\x00\\x1b here" in error.text
    vllm_failure = suites["goldens.vllm"].find("testcase/failure")
    assert vllm_failure.get("message").startswith("drift: the reference refused")


def test_markdown_cells_say_ok_drift_known_error_and_escape_the_table():
    text = markdown_report.markdown(Summary(OUTCOMES))
    summary, header, rows = table(text)
    assert summary.startswith("**goldens check: failed (1 error, 3 drift)**")
    assert header == ["model", "shape", "transformers", "llama-server", "vllm"]
    grid = {(m, s): dict(zip(header[2:], cells)) for m, s, *cells in rows}
    assert grid["qwen3", "plain"]["transformers"] == "ok"
    assert grid["qwen3", "plain"]["vllm"] == "—"
    assert grid["qwen3", "plain"]["llama-server"] == "**drift at token 7**"
    assert grid["qwen3", "tools"]["llama-server"] == "known divergence: drops \\<think> \\| by design"
    assert grid["gemma3", "plain--x"]["transformers"] == "**error**"
    assert grid["gemma3", "plain--x"]["llama-server"] == "**reviewed divergence moved at token 7**"
    assert grid["gemma3", "tools"]["vllm"] == "**drift**"
    (look,) = [rows for header, rows in tables(text) if header[0] == "needs a look"]
    cells = {(row[1], row[2], row[3]): row[4] for row in look}
    assert cells["qwen3", "plain", "llama-server"] == "`` … 'f' 'g' [-'\\|'-] {+'`'+} ``"
    assert cells["gemma3", "plain--x", "transformers"] == "boom \\\\x00\\\\x1b here"  # escaped for Markdown
    assert cells["gemma3", "tools", "vllm"].startswith("the reference refused")
    assert "\x00" not in text and "\x1b" not in text
    # plain text lines up: every line of a table has the same length
    for block in re.findall(r"(?:^\|.*\n)+", text, re.M):
        assert len({len(line) for line in block.splitlines()}) == 1
    assert text.count("<details><summary>") == 5 and text.count("```text") == 4


def test_markdown_details_are_capped_for_a_pr_comment():
    many = [drift(f"qwen3/s{i}") for i in range(markdown_report.DETAILS_LIMIT + 5)]
    text = markdown_report.markdown(Summary(many))
    assert text.count("<details><summary>qwen3/s") == markdown_report.DETAILS_LIMIT
    assert "… 5 more full reports are in the JUnit report." in text


def test_a_second_run_on_the_same_report_is_refused(workspace, tmp_path):
    """While one check holds out.md, another aiming at it exits 2 at once and writes nothing."""
    out_md = tmp_path / "out.md"
    with destination.claim(out_md):
        message = one_line_error(check(workspace, "--model", "qwen3", "--report", out_md))
        assert "another goldens check is writing this report" in message
        assert not out_md.exists()
    result = check(workspace, "--model", "qwen3", "--report", out_md)
    assert result.exit_code == 0, result.stdout
    assert out_md.exists() and not list(tmp_path.glob(".out.md.lock"))


def test_write_is_atomic_under_concurrent_writers(tmp_path):
    """Two runs writing one report: a reader only ever sees one whole report or the other."""
    path = tmp_path / "report.md"
    texts = ["A" * 200_000 + "\n", "B" * 300_000 + "\n"]
    destination.write(path, texts[0])
    stop = threading.Event()
    seen = set()

    def writer(text):
        while not stop.is_set():
            destination.write(path, text)

    threads = [threading.Thread(target=writer, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    try:
        for _ in range(300):
            content = path.read_text()
            assert content in texts
            seen.add(content[0])
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not [p for p in tmp_path.iterdir() if p.name != "report.md"]


def test_write_failure_is_one_line_and_leaves_nothing(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(GoldensError, match="cannot write"):
        destination.write(tmp_path / "dir", "text")
    with pytest.raises(GoldensError, match="is a directory"):
        destination.check_destination(tmp_path / "dir")
    assert [p.name for p in tmp_path.iterdir()] == ["dir"] and not list((tmp_path / "dir").iterdir())


def test_the_shipped_ci_workflow_runs_the_gate_and_uploads_both_reports():
    """This repository's workflow calls the reusable one, whose shards each write results that
    the report job merges into both reports and uploads, whatever the verdict."""
    import yaml

    caller = yaml.safe_load((ROOT / ".github" / "workflows" / "goldens.yml").read_text(encoding="utf-8"))
    assert caller["jobs"]["goldens"]["uses"] == "./.github/workflows/goldens-reusable.yml"
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "goldens-reusable.yml").read_text(encoding="utf-8"))
    check_runs = "\n".join(step.get("run", "") for step in workflow["jobs"]["check"]["steps"])
    # the shard's command, GITHUB_ACTIONS=false set for it alone (the report job annotates)
    (gate,) = [line for line in check_runs.splitlines() if re.match(r"\s*(\w+=\S*\s+)*goldens check\b", line)]
    assert "--shard" in check_runs and "--results" in check_runs
    steps = workflow["jobs"]["report"]["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    (merge,) = [line for line in runs.splitlines() if line.strip().startswith("goldens report merge")]
    junit = re.search(r"--junit (\S+)", merge)[1]
    markdown = re.search(r"--report (\S+)", merge)[1]
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert upload["if"] == "always()"
    assert junit in upload["with"]["path"] and markdown in upload["with"]["path"]
    assert "goldens diff" in runs
