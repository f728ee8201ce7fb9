"""Template coverage as text for the terminal, Markdown for a report file, and JSON."""

from __future__ import annotations

import json
from typing import Any

from generator import markdown as md
from generator.coverage.trace import Coverage


def _span_label(span: dict[str, Any]) -> str:
    first, last = span["lines"]
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    return where + (" (partly)" if span["partly"] else "")


def span_block(name: str, span: dict[str, Any]) -> list[str]:
    """One never-executed span in Markdown: `model, lines a-b:` and its template text fenced
    (this report's and `check --coverage`'s)."""
    return [f"{name}, {_span_label(span)}:", *md.code_block(span["text"], "jinja")]


def summary_line(name: str, coverage: Coverage) -> str:
    spans = coverage.spans()
    refused = coverage.cases - coverage.rendered
    counted = (f" by the {coverage.rendered} of {coverage.cases} cases the reference rendered "
               f"({refused} refused, not counted)" if refused else "")
    return (f"{name}: {coverage.percent:.1f}% of the template's code executed{counted} "
            f"({coverage.executed}/{coverage.executable} compiled lines), "
            f"{len(spans)} span(s) never executed")


def text(coverages: dict[str, Coverage]) -> str:
    out = []
    for name, coverage in coverages.items():
        out.append(summary_line(name, coverage))
        for span in coverage.spans():
            out.append(f"  {_span_label(span)}:")
            out.extend(f"    | {row}" for row in span["text"].splitlines())
    total = sum(c.executed for c in coverages.values()), sum(c.executable for c in coverages.values())
    if coverages:
        out.append(f"all models: {100.0 * total[0] / max(total[1], 1):.1f}% ({total[0]}/{total[1]} compiled lines)")
    return "\n".join(out) + "\n"


def markdown(coverages: dict[str, Coverage]) -> str:
    """One table, then every model's never-executed spans folded in one section."""
    out = ["**template coverage**", "", "| model | executed | compiled lines | spans never executed |",
           "| --- | --- | --- | --- |"]
    for name, coverage in coverages.items():
        out.append(f"| {name} | {coverage.percent:.1f}% | {coverage.executed}/{coverage.executable} "
                   f"| {len(coverage.spans())} |")
    out += ["", "<details><summary>never-executed template code</summary>", ""]
    for name, coverage in coverages.items():
        for span in coverage.spans():
            out.extend(span_block(name, span))
    out += ["", "</details>", ""]
    return "\n".join(out)


def as_json(coverages: dict[str, Coverage]) -> str:
    return json.dumps({"models": {name: c.record() for name, c in coverages.items()}},
                      indent=2, sort_keys=True, ensure_ascii=False) + "\n"
