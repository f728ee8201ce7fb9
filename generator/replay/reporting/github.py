"""GitHub Actions output: the job summary and the annotations, and nothing outside Actions.

With GITHUB_ACTIONS=true, `goldens check` and `goldens diff` append their Markdown report to the
file named by $GITHUB_STEP_SUMMARY (the run's summary page) and print workflow commands,
`::error file=goldens/qwen3/plain.json,line=66,title=...::...`, that GitHub turns into
annotations on the golden file and line of each drift (the line of the token where the engine
parts from the golden), shown in the pull request's files tab. The commands go to stderr, which
the runner reads for workflow commands as it does stdout, so `goldens diff --markdown > f`
stays clean.

GitHub shows 10 error and 10 notice annotations a step and takes 1 MiB of summary a step
(actions/toolkit docs/problem-matchers.md); past that it drops the rest silently. So the tenth
annotation says how many more there are, and a summary too long is cut with a note.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from generator import redaction
from generator.goldens import golden_file
from generator.goldens.changes import Change
from generator.goldens.diff import first_moved_token, moved, summary
from generator.replay.reporting import report
from generator.replay.judging import causes, ledger
from generator.replay.reporting.report import Summary

ANNOTATIONS_PER_STEP = 10  # of one level (error, warning, notice)
SUMMARY_LIMIT = 1024 * 1024  # bytes of job summary a step may write


def active(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("GITHUB_ACTIONS") == "true"


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, file: str | None = None, line: int | None = None,
            title: str | None = None) -> str:
    """One workflow command: `::error file=F,line=N,title=T::message`, escaped as the runner
    unescapes it (`%`, CR, LF everywhere; `:` and `,` in properties too)."""
    props = [f"file={_property(file)}"] if file else []
    props += [f"line={line}"] if file and line else []
    props += [f"title={_property(title)}"] if title else []
    return f"::{level}{' ' + ','.join(props) if props else ''}::{_data(message)}"


def workspace_path(path: Path, env: Mapping[str, str] | None = None) -> str:
    """A path as GitHub wants it in an annotation: relative to the checkout ($GITHUB_WORKSPACE,
    else the working directory), or absolute when it lies outside."""
    env = os.environ if env is None else env
    base = Path(env.get("GITHUB_WORKSPACE") or os.getcwd()).resolve()
    full = Path(path).resolve()
    try:
        return full.relative_to(base).as_posix()
    except ValueError:
        return full.as_posix()


def token_line(path: Path, index: int) -> int | None:
    """The 1-based line of token `index` in a golden file as it is on disk (one token a line
    after `"tokens": [`); past the last token, the closing bracket's line; None if unreadable."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    start = next((i for i, line in enumerate(lines) if line.startswith('  "tokens": [')), None)
    if start is None:
        return None
    if lines[start].rstrip().endswith("[]"):
        return start + 1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  ]")), len(lines) - 1)
    return min(start + 2 + index, end + 1)


def _capped(commands: list[str], level: str, noun: str, where: str) -> list[str]:
    """At most ANNOTATIONS_PER_STEP; the last one left says how many more there are and where."""
    if len(commands) <= ANNOTATIONS_PER_STEP:
        return commands
    rest = len(commands) - ANNOTATIONS_PER_STEP + 1
    return commands[:ANNOTATIONS_PER_STEP - 1] + [
        command(level, f"{rest} more {noun} not annotated here (GitHub shows {ANNOTATIONS_PER_STEP} "
                       f"a step): {where}", title=f"goldens: {rest} more {noun}")]


def check_annotations(summary: Summary, root: Path,
                      env: Mapping[str, str] | None = None) -> list[str]:
    """An error annotation per problem of a check run, in the report's order: a drift on its
    golden file (or on its ledger entry when a reviewed divergence moved or went stale), at the
    line of the first divergent token; a stand-in finding on its stand-in entry once reviewed;
    the errors of one engine with one message as one."""
    out = []
    for group in summary.problems():
        first = group[0]
        kind = report.kind(first)
        title = f"goldens {kind.label}: {first.case} [{first.column}]"
        if len(group) > 1:
            text = (report.group_line(group) if first.status != "error" and first.edit is not None
                    else f"{len(group)} cases: {report.problem_line(first)}")
            out.append(command("error", text, title=f"goldens {kind.label}: {first.column}"))
            continue
        engine = first.engine.partition("@")[0]
        if kind.key == report.STALE_CAUSE and first.cause is not None:
            path = causes.path_of(root, first.cause)
        elif kind.key.startswith("ledger"):
            path = ledger.entry_path(root, first.case, engine, stand_in=first.stand_in is not None)
        else:
            path = golden_file.golden_path(root, first.case)
        line = token_line(path, first.divergence.index) if first.divergence is not None else None
        out.append(command("error", report.problem_line(first), workspace_path(path, env), line, title))
    return _capped(out, "error", "problems", "the job summary and the JUnit report list every one")


def diff_annotations(changes: Sequence[Change], env: Mapping[str, str] | None = None) -> list[str]:
    """A notice annotation per golden whose tokens moved, at the line of its first moved token."""
    out = []
    for change in changes:
        if not moved(change):
            continue
        if change.file is None or change.new is None:
            out.append(command("notice", summary(change), title="goldens diff: removed"))
            continue
        index = first_moved_token(change)
        line = token_line(change.file, index) if index is not None else None
        out.append(command("notice", summary(change, provenance=False), workspace_path(change.file, env),
                           line, f"goldens diff: tokens moved in {change.name}"))
    return _capped(out, "notice", "goldens with tokens moved", "the job summary lists every one")


def append_summary(markdown: str, env: Mapping[str, str] | None = None) -> str | None:
    """Append a report to $GITHUB_STEP_SUMMARY, cut to what GitHub takes; a message when it
    cannot (the gate's verdict does not depend on the summary page)."""
    env = os.environ if env is None else env
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    data = redaction.redact_output(markdown).encode("utf-8")  # the one write here not through files.py
    note = "\n\n… cut here: GitHub keeps 1 MiB of summary a step; the report files have it all.\n"
    if len(data) > SUMMARY_LIMIT - 4096:
        data = data[:SUMMARY_LIMIT - 4096].decode("utf-8", "ignore").encode("utf-8") + note.encode()
    try:
        with open(target, "ab") as handle:
            handle.write(data + b"\n")
    except OSError as error:
        return f"cannot append to GITHUB_STEP_SUMMARY {target}: {error.strerror or error}"
    return None


def publish(markdown: str, annotations: list[str], echo: Callable[[str], None],
            env: Mapping[str, str] | None = None) -> None:
    """In Actions: the annotations through `echo` (stderr), the report onto the job summary."""
    if not active(env):
        return
    for line in annotations:
        echo(line)
    problem = append_summary(markdown, env)
    if problem is not None:
        echo(command("warning", problem, title="goldens"))
