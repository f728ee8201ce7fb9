"""The Markdown report of a `goldens check` run, for a reviewer who opens a pull request.

The verdict first, then one table of what needs a look (errors, drifts, reviewed divergences
that moved or were fixed upstream, stand-in findings), each with its first divergence, then each
one's full report folded, then every case folded in a `<details>` block titled with the passes
counted per column.
"""

from __future__ import annotations

from collections.abc import Sequence

from generator import markdown as md
from generator.coverage.report import span_block
from generator.replay.judging.outcome import Outcome
from generator.replay.reporting.report import (
    COUNT_ONLY, Summary, describe_edit, detail, drift_context, first_line, group_line, headline, kind,
    split_case, xml_safe,
)

DETAILS_LIMIT = 25  # full reports in the Markdown; a PR comment has a size limit
ROW_LIMIT = 100  # rows of the needs-a-look table
CELL_LIMIT = 160
GROUP_DETAILS = 5  # full reports shown inside a group of drifts that share one edit


def _text(text: str, limit: int = CELL_LIMIT) -> str:
    """Prose in a table cell: one line, and no character that would start markup or end the cell."""
    return md.escape(first_line(xml_safe(text), limit))


def first_divergence(outcome: Outcome) -> str:
    """The 'first divergence' cell of a problem: the tokens around it, or what happened instead."""
    if outcome.divergence is not None:
        return md.code(drift_context(outcome))
    return _text(detail(outcome))


def cell(outcome: Outcome) -> str:
    """One cell of the folded case x column grid: what passed in words, a problem by its name
    (its first divergence is in the table above)."""
    if outcome.status == "match":
        return "ok"
    if outcome.status == "count":
        return headline(outcome)
    if outcome.status == "both-refuse":
        return "both refuse"
    if outcome.status == "known":
        marker = COUNT_ONLY if outcome.level == "count" else ""
        cause = f" (cause {_text(outcome.cause)})" if outcome.cause else ""
        return f"known divergence{marker}{cause}: {_text(outcome.reason or outcome.detail)}"
    return f"**{headline(outcome)}**"


def _problem_row(group: list[Outcome], surrogates: frozenset[str] = frozenset()) -> list[str]:
    first = group[0]
    model, stem = split_case(first.case)
    model = f"{model} (surrogate)" if model in surrogates else model
    where = first_divergence(first)
    if len(group) > 1:
        models = list(dict.fromkeys(split_case(o.case)[0] + (" (surrogate)" if split_case(o.case)[0] in surrogates
                                                              else "") for o in group))
        model = ", ".join(models) if len(models) <= 3 else f"{len(models)} models"
        stem = f"{len(group)} cases"
        if first.status != "error" and first.edit is not None:  # drifts sharing one first edit
            where = "one edit: " + md.code(describe_edit(first.edit))
    return [headline(first), _text(model), _text(stem), _text(first.column), where]


def _lengths(outcome: Outcome) -> str:
    div = outcome.divergence
    return f" ({div.expected_len} vs {div.actual_len} tokens)" if div is not None else ""


def _full_report(group: list[Outcome]) -> list[str]:
    first = group[0]
    advice = f"\n\n{first.advice}" if first.advice else ""
    if len(group) == 1:
        title = f"{first.case} · {first.column}: {headline(first)}{_lengths(first)}"
        return md.fold(title, md.fenced(xml_safe(first.detail + advice) or "(no detail)"))
    cases = "\n".join(o.case for o in group)
    if first.status != "error" and first.edit is not None:  # one edit: each case's report below it
        reports = [f"{o.case} · {o.column}: {headline(o)}{_lengths(o)}\n{o.detail}" for o in group[:GROUP_DETAILS]]
        more = [f"… and {len(group) - GROUP_DETAILS} more"] if len(group) > GROUP_DETAILS else []
        return md.fold(f"{len(group)} cases · {first.column}: one edit, {describe_edit(first.edit)}",
                       md.fenced(xml_safe("\n\n".join([group_line(group), *reports, *more]))))
    return md.fold(f"{len(group)} cases · {first.column}: {headline(first)}",
                   md.fenced(xml_safe(f"{first.detail}{advice}\n\n{cases}")))


def _passes_title(outcomes: Sequence[Outcome]) -> str:
    """'140 of 144 passed · transformers 48/48 · llama-server 44/48 (2 known divergence) · …'."""
    columns: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        columns.setdefault(outcome.column, []).append(outcome)
    parts = []
    for column, items in columns.items():
        passed = sum(1 for o in items if kind(o).passing)
        known = sum(1 for o in items if o.status == "known")
        both = sum(1 for o in items if o.status == "both-refuse")
        version = next((o.version for o in items if o.version), "")  # what the engine said it is
        name = f"{column} ({version})" if version else column
        said = [f"{known} known divergence"] if known else []
        said += [f"{both} both refuse"] if both else []
        parts.append(f"{name} {passed}/{len(items)}" + (f" ({', '.join(said)})" if said else ""))
    total = sum(1 for o in outcomes if kind(o).passing)
    return " · ".join([f"{total} of {len(outcomes)} passed", *parts])


def _grid(outcomes: Sequence[Outcome], surrogates: frozenset[str] = frozenset()) -> list[str]:
    """Every case: a row per (model, shape), a column per engine (and stand-in)."""
    columns: list[str] = []
    cases: list[str] = []
    grid: dict[tuple[str, str], Outcome] = {}
    versions: dict[str, str] = {}
    for outcome in outcomes:
        if outcome.version:
            versions.setdefault(outcome.column, outcome.version)
        if outcome.column not in columns:
            columns.append(outcome.column)
        if outcome.case not in cases:
            cases.append(outcome.case)
        grid[outcome.case, outcome.column] = outcome
    rows = []
    for case in cases:
        model, stem = split_case(case)
        model = f"{model} (surrogate)" if model in surrogates else model
        rows.append([model, stem] + [cell(grid[case, c]) if (case, c) in grid else "—" for c in columns])
    header = [f"{c} ({versions[c]})" if c in versions and not c.endswith("@" + versions[c]) else c
              for c in columns]
    return md.table(["model", "shape", *header], rows)


def markdown(summary: Summary, title: str = "goldens check") -> str:
    """The pull-request report: verdict, notes on what was not done (e.g. --no-confirm), what
    needs a look (each with its first divergence and its full report folded), then every case
    folded under the passes counted per column."""
    outcomes = summary.outcomes
    lines = [f"**{title}: {summary.verdict()}** · {summary.line()}"]
    if summary.class_line():  # engine defects apart from policy: what to report upstream
        lines += ["", summary.class_line()]
    for note in [*summary.notes, *summary.refusals()]:  # said in every report, not only on the terminal
        lines += ["", f"> {_text(note, 400)}"]
    for (cause, column), n in summary.causes().items():
        lines += ["", f"> known: the reviewed cause {_text(cause)} explained {n} case{'s' if n != 1 else ''} "
                      f"of {_text(column)}"]
    groups = summary.problems()
    if groups:
        rows = [_problem_row(group, summary.surrogates()) for group in groups[:ROW_LIMIT]]
        lines += ["", *md.table(["needs a look", "model", "shape", "engine", "first divergence"], rows)]
        if len(groups) > ROW_LIMIT:
            lines += ["", f"… and {len(groups) - ROW_LIMIT} more; the JUnit report has every one."]
        for group in groups[:DETAILS_LIMIT]:
            lines += ["", *_full_report(group)]
        if len(groups) > DETAILS_LIMIT:
            lines += ["", f"… {len(groups) - DETAILS_LIMIT} more full reports are in the JUnit report."]
    if any(kind(o).passing for o in outcomes):
        lines += ["", *md.fold(_passes_title(outcomes), _grid(outcomes, summary.surrogates()))]
    if summary.coverage:
        lines += ["", *_coverage(summary.coverage)]
    return "\n".join(lines) + "\n"


def _coverage(records: dict[str, dict]) -> list[str]:
    """`check --coverage`: how much of each checked model's template the goldens reach, folded,
    with every never-executed span (what no golden checks)."""
    executed = sum(r["executed"] for r in records.values())
    executable = sum(r["executable"] for r in records.values())
    title = (f"template coverage: {100.0 * executed / max(executable, 1):.1f}% of the checked models' "
             f"template code executed ({executed}/{executable} compiled lines)")
    rows = [[name, f"{r['percent']:.1f}%", f"{r['executed']}/{r['executable']}", str(len(r["never_executed"]))]
            for name, r in records.items()]
    body = md.table(["model", "executed", "compiled lines", "spans never executed"], rows)
    for name, record in records.items():
        for span in record["never_executed"]:
            body += ["", *span_block(name, span)]
    return md.fold(title, body)
