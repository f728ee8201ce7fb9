"""Reports of a `goldens check` run: JUnit XML for CI, Markdown for a pull request, and the
terminal's one line per problem.

All are built from the run's list of Outcome and nothing else; the files are written with
files.atomic_write, so a reader, or a second run writing the same path at the same moment, only
ever sees a whole report, and nothing but a regular file (or a new path) is ever written.

JUnit: one <testsuite> per engine, one <testcase> per (model, shape[--variant]) in it, with
classname = model and name = the case's stem. A drift is a <failure message="drift at token N">
carrying the full drift report; an engine that could not answer is an <error>; a reviewed
(known) divergence passes and is listed, with its reason, in the suite's <system-out>. The
output keeps to what both the Ant/"windyroad" JUnit.xsd and Jenkins' junit-10.xsd accept.

Markdown, for a reviewer who opens a pull request: the verdict first, then one table of what needs
a look (errors, drifts, reviewed divergences that moved or were fixed upstream), each with its
first divergence, then each one's full report folded, then every case folded in a `<details>`
block titled with the passes counted per engine. What an outcome is called, where it sorts and
whether it passes come from one ordered table, KINDS, so a new status is one row there.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import dataclasses
import fcntl
import os
import re
import socket
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path

from generator import files
from generator import markdown as md
from generator.errors import GoldensError
from generator.replay.judge import Outcome

STATUSES = ("match", "known", "drift", "error", "count")
COUNT_ONLY = " (count only)"  # marks every verdict judged from a prompt token count alone
DETAILS_LIMIT = 25  # full reports in the Markdown; a PR comment has a size limit
ROW_LIMIT = 100  # rows of the needs-a-look table
CELL_LIMIT = 160
LINE_LIMIT = 400  # characters of a problem's one terminal line
LEDGER_MOVED = "moved from its ledger entry: "


@dataclasses.dataclass(frozen=True)
class Kind:
    """One row of the ordered status table: what an outcome is called and whether it passes."""

    key: str
    label: str  # in the Markdown and the terminal line
    word: str  # the terminal line's first word
    passing: bool
    colour: str | None = None  # the terminal word's colour (click.style names)


# The order a reviewer reads them in: what stops the gate, what moved, then what passed.
KINDS = (
    Kind("error", "error", "ERROR", False, "red"),
    Kind("drift", "drift", "DRIFT", False, "red"),
    Kind("ledger-moved", "reviewed divergence moved", "DRIFT", False, "red"),
    Kind("ledger-fixed", "fixed upstream, ledger entry stale", "DRIFT", False, "yellow"),
    Kind("known", "known divergence", "known", True),
    Kind("count", "length matches" + COUNT_ONLY, "count", True),
    Kind("match", "match", "ok", True),
)
_KIND = {kind.key: kind for kind in KINDS}

# XML 1.0 allows tab, LF, CR and everything from U+0020 except surrogates and U+FFFE/U+FFFF;
# the rest is shown escaped (`\x1b`), in the Markdown too, where it would be invisible.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# ------------------------------------------------------------------------------ shared helpers

def split_case(case: str) -> tuple[str, str]:
    """'qwen3/tools--thinking-off' -> ('qwen3', 'tools--thinking-off')."""
    model, _, stem = case.partition("/")
    return model, stem


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    """Outcomes per status: the four of STATUSES always, then any other status in the run."""
    n = {status: 0 for status in STATUSES}
    for outcome in outcomes:
        n[outcome.status] = n.get(outcome.status, 0) + 1
    return n


def verdict(outcomes: Sequence[Outcome]) -> str:
    """'passed', or 'failed' with what failed; errors first, as they decide the exit code."""
    n = counts(outcomes)
    failing = {o.status for o in outcomes if not kind(o).passing}
    if not failing:
        return "passed"
    order = ["error", "drift", *sorted(failing - {"error", "drift"})]
    return f"failed ({', '.join(f'{n[s]} {s}' for s in order if s in failing)})"


def summary_line(outcomes: Sequence[Outcome]) -> str:
    n = counts(outcomes)
    line = (f"{len(outcomes)} checked: {n['match']} match, {n['known']} known divergence, "
            f"{n['drift']} drift, {n['error']} error")
    line += f", {n['count']} length only (count only, ids not seen)" if n["count"] else ""
    return line + "".join(f", {count} {status}" for status, count in n.items() if status not in STATUSES)


def kind(outcome: Outcome) -> Kind:
    """The row of KINDS an outcome belongs to; a status not in the table needs a look unless the
    outcome says it is ok, and sorts after the ones the table names."""
    if outcome.status == "drift" and (outcome.detail.startswith(LEDGER_MOVED)
                                      or "recorded a refusal" in outcome.detail):
        return _KIND["ledger-moved"]
    if outcome.status == "drift" and "now matches the reference; the ledger entry" in outcome.detail:
        return _KIND["ledger-fixed"]
    if outcome.status in _KIND:
        return _KIND[outcome.status]
    return Kind(outcome.status, outcome.status.replace("_", " "), outcome.status.upper(), outcome.ok, "red")


def _rank(item: Kind) -> int:
    return next((i for i, k in enumerate(KINDS) if k.key == item.key), len(KINDS))


def headline(outcome: Outcome) -> str:
    """One line for an outcome: 'ok', 'drift at token N', 'known divergence', 'error'."""
    if outcome.status == "match":
        return "ok"
    label = kind(outcome).label
    if outcome.divergence is not None:
        return f"{label} at token {outcome.divergence.index}"
    return label + (COUNT_ONLY if outcome.level == "count" and outcome.status != "count" else "")


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def _first_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# ----------------------------------------------------------------------------------- JUnit XML

def junit_xml(outcomes: Sequence[Outcome], elapsed: float = 0.0,
              timestamp: _dt.datetime | None = None, hostname: str | None = None,
              notes: Sequence[str] = ()) -> str:
    """The run as JUnit XML (one suite per engine); `elapsed` seconds is split evenly over cases."""
    stamp = (timestamp or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S")
    host = hostname or socket.gethostname() or "localhost"
    per_case = elapsed / len(outcomes) if outcomes else 0.0
    engines: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        engines.setdefault(outcome.engine, []).append(outcome)

    root = ET.Element("testsuites")
    for suite_id, (engine, items) in enumerate(engines.items()):
        n = counts(items)
        suite = ET.SubElement(root, "testsuite", {
            "name": _xml_safe(f"goldens.{engine}"),
            "package": _xml_safe(f"goldens.{engine}"),
            "id": str(suite_id),
            "tests": str(len(items)),
            "failures": str(n["drift"]),
            "errors": str(n["error"]),
            "time": f"{per_case * len(items):.3f}",
            "timestamp": stamp,
            "hostname": _xml_safe(host),
        })
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", {"name": "engine", "value": _xml_safe(engine)})
        count_only = sum(1 for o in items if o.level == "count")
        if count_only:  # judged from prompt token counts: these verdicts never saw the ids
            ET.SubElement(properties, "property", {"name": "count_only", "value": str(count_only)})
        for note in notes:
            ET.SubElement(properties, "property", {"name": "note", "value": _xml_safe(note)})
        version = next((o.version for o in items if o.version), "")
        if version:
            ET.SubElement(properties, "property", {"name": "version", "value": _xml_safe(version)})
        known = []
        for outcome in items:
            model, stem = split_case(outcome.case)
            case = ET.SubElement(suite, "testcase", {
                "name": _xml_safe(stem), "classname": _xml_safe(model), "time": f"{per_case:.3f}",
            })
            if outcome.status == "drift":
                failure = ET.SubElement(case, "failure", {
                    "message": _xml_safe(_first_line(_drift_message(outcome))), "type": "drift",
                })
                failure.text = _xml_safe(f"{outcome.case} [{engine}]\n{outcome.detail}")
            elif outcome.status == "error":
                error = ET.SubElement(case, "error", {
                    "message": _xml_safe(_first_line(outcome.detail or "engine error")), "type": "error",
                })
                error.text = _xml_safe(f"{outcome.case} [{engine}]\n{outcome.detail}")
            elif outcome.status == "known":
                known.append(f"{outcome.case} [{engine}]: {headline(outcome)}: {outcome.reason or outcome.detail}")
            elif outcome.status == "count":
                known.append(f"{outcome.case} [{engine}]: {headline(outcome)}: {outcome.detail}")
        ET.SubElement(suite, "system-out").text = _xml_safe("\n".join(known)) if known else None
        ET.SubElement(suite, "system-err")
    ET.indent(root, space="  ")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _drift_message(outcome: Outcome) -> str:
    if outcome.divergence is not None:
        message = f"drift at token {outcome.divergence.index}"
        return message + " (ledger entry moved)" if outcome.detail.startswith(LEDGER_MOVED) else message
    return f"drift: {outcome.detail}"


# ------------------------------------------------------------------------------------ Markdown

def _text(text: str, limit: int = CELL_LIMIT) -> str:
    """Prose in a table cell: one line, and no character that would start markup or end the cell."""
    return md.escape(_first_line(_xml_safe(text), limit))


def _piece(entry: tuple[int, int, str] | None) -> str:
    return "(end)" if entry is None else repr(entry[2])


def drift_context(outcome: Outcome, before: int = 2) -> str:
    """The tokens around the first divergence, wdiff style: `'a' 'b' [-'x'-] {+'y'+}`."""
    div = outcome.divergence
    if div is None:
        return ""
    expected = {pos: entry for entry in div.expected for pos in [entry[0]]}
    actual = {pos: entry for entry in div.actual for pos in [entry[0]]}
    shared = [expected[p] for p in range(div.index - before, div.index) if p in expected]
    lead = ("… " if shared and shared[0][0] > 0 else "") + " ".join(_piece(e) for e in shared)
    change = f"[-{_piece(expected.get(div.index))}-] {{+{_piece(actual.get(div.index))}+}}"
    return f"{lead} {change}".strip()


def _detail(outcome: Outcome) -> str:
    """An error's message without the engine name the report already shows beside it."""
    detail = outcome.detail
    if outcome.status == "error" and detail.startswith(f"{outcome.engine}: "):
        detail = detail[len(outcome.engine) + 2:]
    return detail


def first_divergence(outcome: Outcome) -> str:
    """The 'first divergence' cell of a problem: the tokens around it, or what happened instead."""
    if outcome.divergence is not None:
        return md.code(drift_context(outcome))
    return _text(_detail(outcome))


def cell(outcome: Outcome) -> str:
    """One cell of the folded case x engine grid: what passed in words, a problem by its name
    (its first divergence is in the table above)."""
    if outcome.status == "match":
        return "ok"
    if outcome.status == "count":
        return headline(outcome)
    if outcome.status == "known":
        marker = COUNT_ONLY if outcome.level == "count" else ""
        return f"known divergence{marker}: {_text(outcome.reason or outcome.detail)}"
    if outcome.status == "count":
        return headline(outcome)
    return f"**{headline(outcome)}**"


def problems(outcomes: Sequence[Outcome]) -> list[list[Outcome]]:
    """What needs a look, in KINDS order (then run order), one group per row: a drift alone, the
    errors of one engine with one message together (an engine that went away fails every case)."""
    groups: dict[tuple, list[Outcome]] = {}
    for position, outcome in enumerate(outcomes):
        if kind(outcome).passing:
            continue
        key = ((outcome.engine, " ".join(_detail(outcome).split())) if outcome.status == "error"
               else (position,))
        groups.setdefault(key, []).append(outcome)
    return sorted(groups.values(), key=lambda group: _rank(kind(group[0])))


def _problem_row(group: list[Outcome]) -> list[str]:
    first = group[0]
    model, stem = split_case(first.case)
    if len(group) > 1:
        models = list(dict.fromkeys(split_case(o.case)[0] for o in group))
        model = ", ".join(models) if len(models) <= 3 else f"{len(models)} models"
        stem = f"{len(group)} cases"
    return [headline(first), _text(model), _text(stem), _text(first.engine), first_divergence(first)]


def _full_report(group: list[Outcome]) -> list[str]:
    first = group[0]
    if len(group) == 1:
        div = first.divergence
        lengths = f" ({div.expected_len} vs {div.actual_len} tokens)" if div is not None else ""
        title = f"{first.case} · {first.engine}: {headline(first)}{lengths}"
        return md.fold(title, md.fenced(_xml_safe(first.detail) or "(no detail)"))
    cases = "\n".join(o.case for o in group)
    return md.fold(f"{len(group)} cases · {first.engine}: {headline(first)}",
                   md.fenced(_xml_safe(f"{first.detail}\n\n{cases}")))


def _passes_title(outcomes: Sequence[Outcome]) -> str:
    """'140 of 144 passed · transformers 48/48 · llama-server 44/48 (2 known divergence) · …'."""
    engines: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        engines.setdefault(outcome.engine, []).append(outcome)
    parts = []
    for engine, items in engines.items():
        passed = sum(1 for o in items if kind(o).passing)
        known = sum(1 for o in items if o.status == "known")
        version = next((o.version for o in items if o.version), "")  # what the engine said it is
        name = f"{engine} ({version})" if version else engine
        parts.append(f"{name} {passed}/{len(items)}" + (f" ({known} known divergence)" if known else ""))
    total = sum(1 for o in outcomes if kind(o).passing)
    return " · ".join([f"{total} of {len(outcomes)} passed", *parts])


def _grid(outcomes: Sequence[Outcome]) -> list[str]:
    """Every case: a row per (model, shape), a column per engine."""
    engines: list[str] = []
    cases: list[str] = []
    grid: dict[tuple[str, str], Outcome] = {}
    versions: dict[str, str] = {}
    for outcome in outcomes:
        if outcome.version:
            versions.setdefault(outcome.engine, outcome.version)
        if outcome.engine not in engines:
            engines.append(outcome.engine)
        if outcome.case not in cases:
            cases.append(outcome.case)
        grid[outcome.case, outcome.engine] = outcome
    rows = []
    for case in cases:
        model, stem = split_case(case)
        rows.append([model, stem] + [cell(grid[case, e]) if (case, e) in grid else "—" for e in engines])
    header = [f"{e} ({versions[e]})" if e in versions and not e.endswith("@" + versions[e]) else e
              for e in engines]
    return md.table(["model", "shape", *header], rows)


def markdown(outcomes: Sequence[Outcome], title: str = "goldens check", notes: Sequence[str] = ()) -> str:
    """The pull-request report: verdict, notes on what was not done (e.g. --no-confirm), what
    needs a look (each with its first divergence and its full report folded), then every case
    folded under the passes counted per engine."""
    lines = [f"**{title}: {verdict(outcomes)}** · {summary_line(outcomes)}"]
    for note in notes:  # said in every report, not only on the terminal
        lines += ["", f"> {_text(note, 400)}"]
    groups = problems(outcomes)
    if groups:
        rows = [_problem_row(group) for group in groups[:ROW_LIMIT]]
        lines += ["", *md.table(["needs a look", "model", "shape", "engine", "first divergence"], rows)]
        if len(groups) > ROW_LIMIT:
            lines += ["", f"… and {len(groups) - ROW_LIMIT} more; the JUnit report has every one."]
        for group in groups[:DETAILS_LIMIT]:
            lines += ["", *_full_report(group)]
        if len(groups) > DETAILS_LIMIT:
            lines += ["", f"… {len(groups) - DETAILS_LIMIT} more full reports are in the JUnit report."]
    if any(kind(o).passing for o in outcomes):
        lines += ["", *md.fold(_passes_title(outcomes), _grid(outcomes))]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ terminal

def use_colour(stream) -> bool:
    """Colour only on an interactive terminal, and never with NO_COLOR set (no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def problem_line(outcome: Outcome) -> str:
    """A problem in one line: 'drift at token 5 (25 vs 25 tokens): … ' are' [-' terse'-] {+' tersely'+}'."""
    if outcome.divergence is not None:
        text = f"{outcome.divergence.summary()}: {drift_context(outcome)}"
        if kind(outcome).key != "drift":
            text = f"{kind(outcome).label}: {text}"
    else:
        text = _detail(outcome) if outcome.status == "error" else outcome.detail
    return _first_line(_xml_safe(text), LINE_LIMIT)


def terminal(outcomes: Sequence[Outcome], colour: bool = False, errors: bool = True,
             summary: str | None = None) -> list[str]:
    """The terminal report: one line per problem in KINDS order, then the counts (`summary`, or
    summary_line's). `errors=False` leaves error outcomes to error_lines (said on stderr)."""
    import click

    def style(text: str, name: str | None, bold: bool = False) -> str:
        return click.style(text, fg=name, bold=bold) if colour and name else text

    lines = []
    for group in problems(outcomes):
        for outcome in group:
            if outcome.status == "error" and not errors:
                continue
            what = kind(outcome)
            lines.append(f"{style(what.word, what.colour, bold=True)} {outcome.case} [{outcome.engine}]: "
                         f"{problem_line(outcome)}")
    passed = all(kind(o).passing for o in outcomes)
    lines.append(style(summary or summary_line(outcomes), "green" if passed else "red"))
    return lines


def error_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """Error outcomes as stderr lines: one per distinct fault, with how many cases it cost, so a
    dead server is one line rather than one per case (every case stays in the reports)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for outcome in outcomes:
        if outcome.status == "error":
            first = (outcome.detail.strip().splitlines() or ["(no detail)"])[0]
            groups.setdefault((outcome.engine, first), []).append(outcome.case)
    lines = []
    for (engine, detail), cases in groups.items():
        which = cases[0] if len(cases) == 1 else f"{len(cases)} cases, from {cases[0]}"
        lines.append(f"goldens: error: [{engine}] {detail} ({which})")
    return lines


# ------------------------------------------------------------------------------------ writing

def check_destination(*paths: Path | None) -> None:
    """Refuse, before a run, a report path that cannot be written, that is not a regular file
    or a new path (a device, a FIFO, a link to one: never replaced), or two reports on one path."""
    seen: dict[Path, Path] = {}
    for path in paths:
        if path is None:
            continue
        resolved = Path(os.path.realpath(path))
        if resolved in seen:
            raise GoldensError(f"{path}: --junit and --report name the same file")
        seen[resolved] = path
        try:
            info = resolved.stat()
        except (FileNotFoundError, NotADirectoryError):  # a new path (a bad parent is said below)
            info = None
        except OSError as error:
            raise GoldensError(f"{path}: cannot use as a report ({error.strerror})") from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise GoldensError(f"{path}: is a directory, not a report file")
        if info is not None and not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            via = f" (a link to {resolved})" if resolved != Path(os.path.abspath(path)) else ""
            raise GoldensError(f"{path}: is a {kind}{via}; a report is written only to a regular "
                               "file or a new path")
        parent = resolved.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise GoldensError(f"{path}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise GoldensError(f"{path}: {parent} is not writable")


_KINDS = {stat.S_IFCHR: "character device", stat.S_IFBLK: "block device", stat.S_IFIFO: "FIFO",
          stat.S_IFSOCK: "socket"}


@contextlib.contextmanager
def claim(*paths: Path | None) -> Iterator[None]:
    """Hold each report path for the length of a run: a second run aiming at the same file is
    refused at once (exit 2) instead of racing the first one to it."""
    held = []
    try:
        for path in paths:
            if path is None:
                continue
            path = Path(os.path.realpath(path))  # two links to one report share one claim
            lock = path.parent / f".{path.name}.lock"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                handle = open(lock, "a")
            except OSError as error:  # /proc/r.md: its folder takes no lock file
                raise GoldensError(f"{path}: cannot write its lock file {lock} ({error.strerror})") from None
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise GoldensError(f"{path}: another goldens check is writing this report") from None
            held.append((lock, handle))
        yield
    finally:
        for lock, handle in held:
            lock.unlink(missing_ok=True)
            handle.close()


def write(path: Path, text: str) -> None:
    """Write through files.atomic_write: a whole report or none, a regular file only (a
    symlink is written through to its target), an existing report's mode kept."""
    files.atomic_write(Path(path), text, only_if_changed=False)
