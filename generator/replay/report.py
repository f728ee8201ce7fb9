"""Reports of a `goldens check` run: JUnit XML for CI, Markdown for a pull-request comment.

Both are built from the run's list of Outcome and nothing else, and both are written atomically
(a temp file beside the target, then os.replace), so a reader, or a second run writing the same
path at the same moment, only ever sees a whole report.

JUnit: one <testsuite> per engine, one <testcase> per (model, shape[--variant]) in it, with
classname = model and name = the case's stem. A drift is a <failure message="drift at token N">
carrying the full drift report; an engine that could not answer is an <error>; a reviewed
(known) divergence passes and is listed, with its reason, in the suite's <system-out>. The
output keeps to what both the Ant/"windyroad" JUnit.xsd and Jenkins' junit-10.xsd accept.

Markdown: a summary line, then a table model x shape x engine (`ok`, `drift at token N` with the
tokens around it, `known divergence` with its reason, `error`), then the full report of each
drift and error in a code block. Columns are padded so the plain text lines up too.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import os
import re
import socket
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from generator.errors import GoldensError
from generator.replay.judge import Outcome

STATUSES = ("match", "known", "drift", "error")
DETAILS_LIMIT = 25  # full reports in the Markdown; a PR comment has a size limit
CELL_LIMIT = 160
PAD_LIMIT = 40_000  # characters a padded table may take; a PR comment holds 65,536
LEDGER_MOVED = "moved from its ledger entry: "

# XML 1.0 allows tab, LF, CR and everything from U+0020 except surrogates and U+FFFE/U+FFFF;
# the rest is shown escaped (`\x1b`), in the Markdown too, where it would be invisible.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# ------------------------------------------------------------------------------ shared helpers

def split_case(case: str) -> tuple[str, str]:
    """'qwen3/tools--thinking-off' -> ('qwen3', 'tools--thinking-off')."""
    model, _, stem = case.partition("/")
    return model, stem


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {status: sum(1 for o in outcomes if o.status == status) for status in STATUSES}


def verdict(outcomes: Sequence[Outcome]) -> str:
    """'passed', or 'failed' with what failed; errors first, as they decide the exit code."""
    n = counts(outcomes)
    if not n["drift"] and not n["error"]:
        return "passed"
    parts = [f"{n[s]} {s}" for s in ("error", "drift") if n[s]]
    return f"failed ({', '.join(parts)})"


def summary_line(outcomes: Sequence[Outcome]) -> str:
    n = counts(outcomes)
    return (f"{len(outcomes)} checked: {n['match']} match, {n['known']} known divergence, "
            f"{n['drift']} drift, {n['error']} error")


def headline(outcome: Outcome) -> str:
    """One line for an outcome: 'ok', 'drift at token N', 'known divergence', 'error'."""
    if outcome.status == "match":
        return "ok"
    if outcome.status == "known":
        return "known divergence"
    if outcome.status == "error":
        return "error"
    if outcome.divergence is not None:
        return f"drift at token {outcome.divergence.index}"
    return "drift"


def _xml_safe(text: str) -> str:
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def _first_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# ----------------------------------------------------------------------------------- JUnit XML

def junit_xml(outcomes: Sequence[Outcome], elapsed: float = 0.0,
              timestamp: _dt.datetime | None = None, hostname: str | None = None) -> str:
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
                known.append(f"{outcome.case} [{engine}]: known divergence: {outcome.reason or outcome.detail}")
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

def _code(text: str) -> str:
    """An inline code span that survives a GFM table: pipes escaped, backticks fenced around."""
    text = text.replace("|", "\\|")
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or run else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _text(text: str, limit: int = CELL_LIMIT) -> str:
    """Prose in a table cell: one line, and no character that would start markup or end the cell."""
    text = _first_line(_xml_safe(text), limit)
    return re.sub(r"([\\`*|<\[\]])", r"\\\1", text)


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


def cell(outcome: Outcome) -> str:
    """One table cell for an outcome (Markdown-safe)."""
    if outcome.status == "match":
        return "ok"
    if outcome.status == "known":
        return f"known divergence: {_text(outcome.reason or outcome.detail)}"
    if outcome.status == "error":
        detail = outcome.detail
        if detail.startswith(f"{outcome.engine}: "):
            detail = detail[len(outcome.engine) + 2:]
        return f"**error**: {_text(detail, 48)}"
    if outcome.divergence is not None:
        moved = " (ledger entry moved)" if outcome.detail.startswith(LEDGER_MOVED) else ""
        return f"**drift at token {outcome.divergence.index}**{moved}: {_code(drift_context(outcome))}"
    return f"**drift**: {_text(outcome.detail)}"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A GFM table, its columns padded so the plain text lines up too (unless that makes it huge)."""
    widths = [max(3, max(len(str(c)) for c in column)) for column in zip(header, *rows)]
    if sum(widths) * (len(rows) + 2) > PAD_LIMIT:
        widths = [3] * len(widths)

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    return [line(header), line("-" * w for w in widths), *(line(r) for r in rows)]


def _fenced(text: str, info: str = "text") -> list[str]:
    run = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (run + 1)
    return [f"{fence}{info}", text, fence]


def markdown(outcomes: Sequence[Outcome], title: str = "goldens check") -> str:
    """The PR-comment report: summary line, the model x shape x engine table, the full reports."""
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

    lines = [f"**{title}: {verdict(outcomes)}** · {summary_line(outcomes)}", ""]
    rows = []
    for case in cases:
        model, stem = split_case(case)
        rows.append([model, stem] + [cell(grid[case, e]) if (case, e) in grid else "—" for e in engines])
    header = [f"{e} ({versions[e]})" if e in versions and not e.endswith("@" + versions[e]) else e
              for e in engines]
    lines += markdown_table(["model", "shape", *header], rows)

    bad = [o for o in outcomes if o.status in ("drift", "error")]
    if bad:
        lines += ["", "### Drift and errors", ""]
        for outcome in bad[:DETAILS_LIMIT]:
            lines += [f"#### {outcome.case} · {outcome.engine}: {headline(outcome)}", ""]
            lines += _fenced(_xml_safe(outcome.detail) or "(no detail)")
            lines.append("")
        if len(bad) > DETAILS_LIMIT:
            lines += [f"… and {len(bad) - DETAILS_LIMIT} more; the JUnit report has every one.", ""]
        while lines[-1] == "":
            lines.pop()
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ writing

def check_destination(*paths: Path | None) -> None:
    """Refuse, before a run, a report path that cannot be written or two reports on one path."""
    seen: dict[Path, Path] = {}
    for path in paths:
        if path is None:
            continue
        resolved = Path(os.path.abspath(path))
        if resolved in seen:
            raise GoldensError(f"{path}: --junit and --report name the same file")
        seen[resolved] = path
        if resolved.is_dir():
            raise GoldensError(f"{path}: is a directory, not a report file")
        parent = resolved.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise GoldensError(f"{path}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise GoldensError(f"{path}: {parent} is not writable")


@contextlib.contextmanager
def claim(*paths: Path | None) -> Iterator[None]:
    """Hold each report path for the length of a run: a second run aiming at the same file is
    refused at once (exit 2) instead of racing the first one to it."""
    held = []
    try:
        for path in paths:
            if path is None:
                continue
            path = Path(os.path.abspath(path))
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = path.parent / f".{path.name}.lock"
            handle = open(lock, "a")
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
    """Write atomically: a temp file in the same directory, then os.replace; never a partial file."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise GoldensError(f"{path}: cannot write ({error.strerror or error})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as error:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(error, OSError):
            raise GoldensError(f"{path}: cannot write ({error.strerror or error})") from None
        raise
