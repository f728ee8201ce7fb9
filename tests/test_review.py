"""Reviewing in a pull request: the check report puts what needs a look first and folds the
passes, the terminal says one line per problem, and in GitHub Actions `goldens check` and
`goldens diff` write the job summary and annotate the golden files (and nothing outside Actions).

The Actions runs are real subprocesses of `python -m generator.cli` over the transformers engine
on a copy of the committed goldens with edited tokens; the committed goldens are never edited.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CONFIG, GOLDENS, ROOT, render_count, token_count

from generator import files
from generator.goldens import golden_file
from generator.replay.running import check as check_plan
from generator.replay.reporting import github, markdown_report, terminal
from generator.replay.judging import divergence, ledger
from generator.replay.reporting.report import Summary, summary_line
from generator.replay.judging.outcome import Outcome

SHAPES = [f"s{i:02d}" for i in range(48)]
ENGINES = ["transformers", "llama-server", "vllm"]
ANNOTATION = re.compile(r"^::(error|notice|warning)(?: ([^:]*))?::(.*)$")


def drift(case: str, engine: str, at: int, prefix: str = "", kind: str = "") -> Outcome:
    ids = list(range(100, 120))
    moved = ids[:at] + [7] + ids[at + 1:]
    div = divergence.diverge(ids, [f"t{i}" for i in ids], None, moved, [f"t{i}" for i in moved], None)
    return Outcome(case, engine, "drift", prefix + divergence.format_divergence(div, "reference", engine),
                   divergence=div, kind=kind)


def big_run() -> list[Outcome]:
    """144 cases over three engines: 131 match, 2 known, 4 drifts of three kinds, 6 errors (five
    of one engine with one message), and one outcome of a status the report does not know."""
    special = {
        ("qwen3/s03", "llama-server"): drift("qwen3/s03", "llama-server", 11),
        ("qwen3/s20", "transformers"): drift("qwen3/s20", "transformers", 4),
        ("qwen3/s07", "vllm"): drift("qwen3/s07", "vllm", 9, "moved from its ledger entry: ", "ledger-moved"),
        ("qwen3/s08", "vllm"): Outcome("qwen3/s08", "vllm", "drift",
                                       "vllm now matches the reference; the ledger entry s08.vllm.json is "
                                       "stale (was: drops return)", kind="ledger-fixed"),
        ("qwen3/s09", "llama-server"): Outcome("qwen3/s09", "llama-server", "known", "drops return",
                                               reason="drops return"),
        ("qwen3/s10", "llama-server"): Outcome("qwen3/s10", "llama-server", "known", "drops return",
                                               reason="drops return"),
        ("qwen3/s30", "transformers"): Outcome("qwen3/s30", "transformers", "error",
                                               "transformers: template raised: boom"),
        ("qwen3/s31", "llama-server"): Outcome("qwen3/s31", "llama-server", "count-mismatch",
                                               "prompt_tokens 41, golden 40"),
    }
    for shape in SHAPES[40:45]:
        special["qwen3/" + shape, "vllm"] = Outcome("qwen3/" + shape, "vllm", "error",
                                                    "vllm: cannot reach http://127.0.0.1:8000 (ConnectError)")
    return [special.get((f"qwen3/{shape}", engine), Outcome(f"qwen3/{shape}", engine, "match"))
            for engine in ENGINES for shape in SHAPES]


def table_after(text: str, header: str) -> list[list[str]]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_report_of_a_big_run_opens_with_the_verdict_and_what_needs_a_look_and_folds_the_passes():
    outcomes = big_run()
    assert len(outcomes) == 144
    text = markdown_report.markdown(Summary(outcomes))
    lines = text.splitlines()
    assert lines[0] == ("**goldens check: failed (6 error, 4 drift, 1 count-mismatch)** · 144 checked: "
                        "131 rendered and match, 0 both refuse, 2 known divergence, 4 drift, 6 error, 1 count-mismatch")

    # what needs a look: one table, in KINDS order, an unknown status last; one engine's errors
    # with one message are one row
    look = table_after(text, "| needs a look")
    assert [row[:4] for row in look] == [
        ["error", "qwen3", "s30", "transformers"],
        ["error", "qwen3", "5 cases", "vllm"],
        ["drift at token 4", "qwen3", "s20", "transformers"],  # within a kind, run order
        ["drift at token 11", "qwen3", "s03", "llama-server"],
        ["reviewed divergence moved at token 9", "qwen3", "s07", "vllm"],
        ["fixed upstream, ledger entry stale", "qwen3", "s08", "vllm"],
        ["count-mismatch", "qwen3", "s31", "llama-server"],
    ]
    assert look[0][4] == "template raised: boom"
    assert look[1][4] == "cannot reach http://127.0.0.1:8000 (ConnectError)"
    assert look[3][4] == "`… 't109' 't110' [-'t111'-] {+'t7'+}`"
    assert look[5][4].startswith("vllm now matches the reference")

    # each problem's full report folded, then one fold with every case, titled with the passes
    folds = re.findall(r"<details><summary>(.*?)</summary>\n\n(.*?)\n\n</details>", text, re.S)
    assert len(folds) == len(look) + 1
    assert [title for title, _ in folds[:3]] == [
        "qwen3/s30 · transformers: error", "5 cases · vllm: error",
        "qwen3/s20 · transformers: drift at token 4 (20 vs 20 tokens)"]
    assert "qwen3/s40\nqwen3/s41\nqwen3/s42\nqwen3/s43\nqwen3/s44" in folds[1][1]
    title, grid = folds[-1]
    assert title == ("133 of 144 passed · transformers 46/48 · llama-server 46/48 (2 known divergence) · "
                     "vllm 41/48")
    assert text.rstrip().endswith("</details>")
    rows = table_after(grid, "| model")
    assert len(rows) == 48 and [r[1] for r in rows] == SHAPES
    assert sum(cell == "ok" for row in rows for cell in row[2:]) == 131
    assert rows[3][3] == "**drift at token 11**" and rows[9][3] == "known divergence: drops return"
    # nothing that passed is spelled out before the fold
    before = text[:text.index("<details><summary>133 of 144 passed")]
    assert "| ok " not in before and "known divergence:" not in before


def test_a_run_that_passed_is_the_verdict_and_one_fold():
    outcomes = [Outcome(f"qwen3/{shape}", "transformers", "match") for shape in SHAPES]
    text = markdown_report.markdown(Summary(outcomes))
    assert text.splitlines()[:3] == [
        "**goldens check: passed** · 48 checked: 48 rendered and match, 0 both refuse, 0 known divergence, 0 drift, 0 error", "",
        "<details><summary>48 of 48 passed · transformers 48/48</summary>"]
    assert "needs a look" not in text and text.count("<details>") == 1


def test_terminal_is_one_line_per_problem_and_colour_only_on_a_terminal(monkeypatch):
    outcomes = big_run()
    lines = terminal.terminal(Summary(outcomes))
    assert len(lines) == 6 + 4 + 1 + 1 + 1  # and the known divergences by class, before the counts
    known = [o for o in outcomes if o.status == "known" and o.stand_in is None]  # none names a class or a cause
    assert lines[-2] == f"known divergences by class: {len(known)} unclassified ({len(known)} causes)"
    assert lines[0] == "ERROR qwen3/s30 [transformers]: template raised: boom"
    assert lines[7] == ("DRIFT qwen3/s03 [llama-server]: drift at token 11 (20 vs 20 tokens): "
                        "… 't109' 't110' [-'t111'-] {+'t7'+}")
    assert lines[8] == ("DRIFT qwen3/s07 [vllm]: reviewed divergence moved: drift at token 9 (20 vs 20 tokens): "
                        "… 't107' 't108' [-'t109'-] {+'t7'+}")
    assert lines[10] == "COUNT-MISMATCH qwen3/s31 [llama-server]: prompt_tokens 41, golden 40"
    assert lines[-1] == summary_line(outcomes)
    assert not any("\x1b" in line for line in lines)
    coloured = terminal.terminal(Summary(outcomes), colour=True)
    assert coloured[0].startswith("\x1b[") and "\x1b[31m" in coloured[-1]

    leader, follower = os.openpty()  # a real terminal
    try:
        with open(follower, "w", closefd=False) as tty, open(os.devnull, "w") as pipe:
            monkeypatch.delenv("NO_COLOR", raising=False)
            assert terminal.use_colour(tty) and not terminal.use_colour(pipe)
            monkeypatch.setenv("NO_COLOR", "1")
            assert not terminal.use_colour(tty)
    finally:
        os.close(leader)
        os.close(follower)


def test_workflow_commands_are_escaped_and_capped_at_what_github_shows():
    line = github.command("error", "50% done\nnext: a, b", file="goldens/a:b,c.json", line=7, title="t: x, y")
    assert line == "::error file=goldens/a%3Ab%2Cc.json,line=7,title=t%3A x%2C y::50%25 done%0Anext: a, b"
    many = [drift(f"qwen3/{shape}", "vllm", 3) for shape in SHAPES[:15]]
    notes = github.check_annotations(Summary(many), GOLDENS, env={"GITHUB_WORKSPACE": str(ROOT)})
    assert len(notes) == github.ANNOTATIONS_PER_STEP
    assert all(n.startswith("::error file=goldens/qwen3/s") for n in notes[:9])
    assert notes[9].startswith("::error title=goldens%3A 6 more problems::6 more problems not annotated")


# --------------------------------------------------------------------- `goldens check` in Actions


def edit_token(path: Path, index: int, token: int, piece: str) -> golden_file.Golden:
    item = golden_file.read(path)
    item.ids[index], item.pieces[index] = token, piece
    files.atomic_write(path, golden_file.dumps(item))
    return item


def run(where: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_") and k != "NO_COLOR"}
    return subprocess.run([sys.executable, "-m", "generator.cli", *args], cwd=where, text=True,
                          capture_output=True, timeout=600,
                          env={**base, "PYTHONPATH": str(ROOT), **env})


@pytest.mark.slow
def test_check_in_github_actions_writes_the_summary_and_one_annotation_per_drift(workspace, tmp_path):
    root = workspace / "goldens"
    edit_token(root / "qwen3" / "plain.json", 5, 12345, " tersely")
    # a reviewed divergence that moved: the golden and its ledger entry both differ from the engine
    tools = edit_token(root / "qwen3" / "tools.json", 7, 11111, "x")
    ledger.write(root, tools, "transformers", "reviewed: x", tools.ids[:7] + [22222] + tools.ids[8:],
                 tools.pieces[:7] + ["y"] + tools.pieces[8:], None)
    # a ledger entry the engine no longer needs: fixed upstream
    plain = golden_file.read(root / "gemma3" / "plain.json")
    ledger.write(root, plain, "transformers", "reviewed: z", plain.ids[:3] + [33333] + plain.ids[4:],
                 plain.pieces[:3] + ["z"] + plain.pieces[4:], None)
    summary = tmp_path / "step_summary.md"
    summary.write_text("## an earlier step\n", encoding="utf-8")
    args = ["check", "--engine", "transformers", "--model", "qwen3", "--model", "gemma3",
            "--report", str(tmp_path / "out.md")]

    result = run(workspace, args, {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary),
                                   "GITHUB_WORKSPACE": str(workspace)})
    assert result.returncode == 1, (result.stdout, result.stderr)
    page = (tmp_path / "out.md").read_text(encoding="utf-8")
    assert summary.read_text(encoding="utf-8") == "## an earlier step\n" + page + "\n"
    assert page.startswith("**goldens check: failed (3 drift)**")

    notes = [ANNOTATION.match(line) for line in result.stderr.splitlines() if line.startswith("::")]
    assert len(notes) == 3 and all(notes) and {n[1] for n in notes} == {"error"}
    where = [dict(p.split("=", 1) for p in n[2].split(",")) for n in notes]
    assert [w["file"] for w in where] == ["goldens/qwen3/plain.json", "goldens/qwen3/tools.transformers.json",
                                          "goldens/gemma3/plain.transformers.json"]
    # the line is the divergent token's row, in the file the reviewer has to change
    plain_lines = (root / "qwen3" / "plain.json").read_text(encoding="utf-8").splitlines()
    assert plain_lines[int(where[0]["line"]) - 1] == '    [12345, " tersely"],'
    entry_lines = (root / "qwen3" / "tools.transformers.json").read_text(encoding="utf-8").splitlines()
    assert json.loads(entry_lines[int(where[1]["line"]) - 1].rstrip(",")) == [22222, "y"]
    assert "line" not in where[2]  # stale: nothing diverges, the whole entry is the point
    n = token_count("qwen3/plain")  # one token replaced: both sides keep the golden's length
    assert notes[0][3].startswith(f"drift at token 5 ({n} vs {n} tokens): … 'You' ' are' [-' tersely'-] {{+' terse'+}}")
    assert notes[1][3].startswith("reviewed divergence moved: drift at token 7")
    assert "now matches the reference" in notes[2][3]
    # the terminal report is unchanged by Actions: one line per problem on stdout, no colour
    # (and the reviewed causes its parsers need, qwen3's and gemma3's reviewed invariant findings,
    # notes, and the summary of every case the check planned: both axes)
    words = [line.split(" ", 1)[0] for line in result.stdout.splitlines()]
    planned = check_plan.plan(CONFIG, ("transformers",), ("qwen3", "gemma3"))
    cases = sum(len(group) for _, _, group in check_plan.groups(CONFIG, planned))
    assert cases > render_count("qwen3", "gemma3")  # qwen3's parse cases too
    assert words[:3] == ["DRIFT"] * 3 and words[-4:] == ["invariant", "invariant", "transformers:", str(cases)], words
    # each known cause's line, and under it its class and why (indented)
    assert set(words[3:-4]) == {"known", ""} and all(a == "known" for a, b in zip(words[3:-5], words[4:-4]) if b == ""), words
    assert "\x1b" not in result.stdout

    # outside Actions: the same run prints no workflow command and leaves the summary alone
    before = summary.read_text(encoding="utf-8")
    quiet = run(workspace, args, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert quiet.returncode == 1 and quiet.stdout == result.stdout
    assert "::" not in quiet.stderr and "::error" not in quiet.stdout
    assert summary.read_text(encoding="utf-8") == before


@pytest.mark.slow
def test_diff_in_github_actions_annotates_the_goldens_whose_tokens_moved(workspace, tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false",
           "-C", str(workspace)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "goldens"], check=True)
    edit_token(workspace / "goldens" / "qwen3" / "plain.json", 5, 12345, " tersely")
    item = golden_file.read(workspace / "goldens" / "llama3" / "tools.json")
    item.provenance["transformers"] = "9.9.9"
    files.atomic_write(workspace / "goldens" / "llama3" / "tools.json", golden_file.dumps(item))
    summary = tmp_path / "step_summary.md"

    result = run(workspace, ["diff", "--report", str(tmp_path / "diff.md")],
                 {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(workspace)})
    assert result.returncode == 0, result.stderr
    assert summary.read_text(encoding="utf-8") == (tmp_path / "diff.md").read_text(encoding="utf-8") + "\n"
    notes = [line for line in result.stderr.splitlines() if line.startswith("::")]
    assert len(notes) == 1  # the provenance-only change is in the summary, not an annotation
    match = ANNOTATION.match(notes[0])
    assert match[1] == "notice" and match[3] == "qwen3/plain: 1 token changed at 5"
    where = dict(p.split("=", 1) for p in match[2].split(","))
    assert where["file"] == "goldens/qwen3/plain.json"
    lines = (workspace / "goldens" / "qwen3" / "plain.json").read_text(encoding="utf-8").splitlines()
    assert lines[int(where["line"]) - 1] == '    [12345, " tersely"],'
    assert "llama3: 1 golden with tokens unchanged · provenance.transformers '5.24.0' → '9.9.9' in 1" in result.stdout

    quiet = run(workspace, ["diff"], {"GITHUB_STEP_SUMMARY": str(summary)})
    assert quiet.returncode == 0 and quiet.stdout == result.stdout and "::" not in quiet.stderr


def test_the_workflow_leaves_the_summary_to_goldens_and_keeps_both_reports():
    """The commands write the job summary themselves; a step that appended the reports too would
    show each one twice. The diff runs once, its Markdown kept for the comment and the artifact."""
    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "goldens-reusable.yml").read_text(encoding="utf-8"))
    steps = workflow["jobs"]["report"]["steps"]
    runs = "\n".join(step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"])
    assert "GITHUB_STEP_SUMMARY" not in runs
    (diff_step,) = [s for s in steps if "goldens diff" in s.get("run", "")]
    assert diff_step["if"] == "always() && inputs.diff && github.event_name == 'pull_request'"
    (command,) = [line.strip() for line in diff_step["run"].splitlines() if line.strip().startswith("goldens diff")]
    report_path = re.search(r"--report (\S+)", command)[1]
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    assert report_path in upload["with"]["path"]
    (comment,) = [s for s in steps if "gh pr comment" in s.get("run", "")]
    assert report_path in comment["run"] and "out/goldens.md" in comment["run"]
