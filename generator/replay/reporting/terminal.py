"""The terminal report of a `goldens check` run: one line per problem (drifts sharing one first
edit together, under one line naming the edit and how to record it once as a cause), what to do
where the reference normalized the body, the reviewed causes that explained cases, the models
that mostly both refuse, then the counts."""

from __future__ import annotations

import os

from generator.replay.reporting.report import Summary, first_line, group_line, kind, problem_line, xml_safe


def use_colour(stream) -> bool:
    """Colour only on an interactive terminal, and never with NO_COLOR set (no-color.org)."""
    return stream.isatty() and not os.environ.get("NO_COLOR")


def terminal(summary: Summary, colour: bool = False, errors: bool = True) -> list[str]:
    """One line per problem in KINDS order, then the Summary's line. `errors=False` leaves
    error outcomes to error_lines (said on stderr)."""
    import click

    def style(text: str, name: str | None, bold: bool = False) -> str:
        return click.style(text, fg=name, bold=bold) if colour and name else text

    lines = []
    for group in summary.problems():
        what = kind(group[0])
        if len(group) > 1 and group[0].status != "error":  # drifts sharing their first edit: a header
            lines.append(f"{style(what.word, what.colour, bold=True)} {len(group)} cases [{group[0].column}]: "
                         f"{first_line(xml_safe(group_line(group)), 800)}")
        for outcome in group:
            if outcome.status == "error" and not errors:
                continue
            lines.append(f"{style(what.word, what.colour, bold=True)} {summary.marked(outcome.case)} [{outcome.column}]: "
                         f"{problem_line(outcome)}")
            if outcome.advice:
                lines.append(f"  {outcome.advice}")
    lines += known_lines(summary)
    lines += summary.refusals()
    lines += [summary.class_line()] if summary.class_line() else []
    lines.append(style(summary.line(), "green" if summary.passed else "red"))
    return lines


def known_lines(summary: Summary) -> list[str]:
    """Each reviewed cause that explained cases, with its class and the first sentence of its
    reason under it: an engine's behaviour goldens ships as known reads as known on a team's own
    model, and says why (check and pytest --goldens print these lines alike)."""
    said = {(o.cause, o.column): o for o in summary.verdicts if o.status == "known" and o.cause is not None}
    lines = []
    for (cause, column), n in summary.causes().items():
        lines.append(f"known [{column}]: the reviewed cause {cause} explained {n} case{'s' if n != 1 else ''}")
        outcome = said[cause, column]
        reason = first_sentence(outcome.reason or "")
        lines.append(f"  {outcome.klass or 'unclassified'}: {reason}" if reason else
                     f"  {outcome.klass or 'unclassified'}")
    return lines


def first_sentence(text: str, limit: int = 300) -> str:
    """A reason's first sentence on one line (a cause's reason runs to a paragraph)."""
    text = " ".join(text.split())
    end = next((i + 1 for i, ch in enumerate(text) if ch == "." and text[i + 1:i + 2] in (" ", "")), len(text))
    return first_line(text[:end], limit)


def error_lines(summary: Summary) -> list[str]:
    """Error outcomes as stderr lines: one per distinct fault, with how many cases it cost, so a
    dead server is one line rather than one per case (every case stays in the reports)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for outcome in summary.outcomes:
        if outcome.status == "error":
            first = (outcome.detail.strip().splitlines() or ["(no detail)"])[0]
            groups.setdefault((outcome.column, first), []).append(outcome.case)
    lines = []
    for (column, detail), cases in groups.items():
        which = cases[0] if len(cases) == 1 else f"{len(cases)} cases, from {cases[0]}"
        lines.append(f"goldens: error: [{column}] {detail} ({which})")
    return lines
