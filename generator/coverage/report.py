"""Template coverage as text for the terminal, Markdown for a report file, and JSON."""

from __future__ import annotations

import json
from typing import Any

from generator import markdown as md
from generator.coverage.trace import Coverage


def _span_label(span: dict[str, Any]) -> str:
    first, last = span["lines"]
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    where += f" (in {span['function']})" if span.get("function") else ""  # engine coverage's spans
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


# ------------------------------------------------------------------ engine-side coverage (engine.py)

def engine_summary_line(coverage) -> str:
    executed, counted = coverage.functions_counted
    return (f"{coverage.engine} {coverage.version}: {coverage.function_percent:.1f}% of its request layer's "
            f"reachable functions executed ({executed}/{counted}); {coverage.percent:.1f}% of their lines "
            f"({coverage.executed}/{coverage.executable} request-time lines, {len(coverage.files)} files; "
            f"{coverage.requests} requests of {', '.join(coverage.models)}; "
            f"{coverage.setup_only} line(s) only start-up ran left out)")


def engine_text(coverages: dict) -> str:
    out = []
    for coverage in coverages.values():
        out.append(engine_summary_line(coverage))
        never = sorted(k for k, s in coverage.function_status().items() if s == "never")
        out.append(f"  reachable functions never executed ({len(never)}):")
        out.extend(f"    {key}" for key in never)
        for path in coverage.files:
            spans = coverage.spans(path)
            out.append(f"  {path}: {coverage.file_percent(path):.1f}% "
                       f"({len(coverage.lines_hit(path))}/{len(coverage.lines(path))} lines), "
                       f"{len(spans)} span(s) never executed")
            for span in spans:
                out.append(f"    {_span_label(span)}:")
                out.extend(f"      | {row}" for row in span["text"].splitlines())
    return "\n".join(out) + "\n"


def engine_table(coverage) -> list[str]:
    """One engine's per-file table in Markdown (docs/engine-coverage.md holds these)."""
    out = [f"**{coverage.engine} {coverage.version}** ({coverage.requests} requests of "
           f"{', '.join(coverage.models)})", "", "| file | executed | lines | spans never executed |",
           "| --- | --- | --- | --- |"]
    for path in coverage.files:
        out.append(f"| `{path}` | {coverage.file_percent(path):.1f}% | "
                   f"{len(coverage.lines_hit(path))}/{len(coverage.lines(path))} | {len(coverage.spans(path))} |")
    out.append(f"| all | {coverage.percent:.1f}% | {coverage.executed}/{coverage.executable} | "
               f"{sum(len(coverage.spans(p)) for p in coverage.files)} |")
    executed, counted = coverage.functions_counted
    out += ["", f"Reachable functions executed: {coverage.function_percent:.1f}% ({executed}/{counted}; "
                f"{coverage.function_status_counts()['setup-only']} only start-up ran, left out)."]
    return out


def engine_markdown(coverages: dict) -> str:
    out = []
    for coverage in coverages.values():
        out += engine_table(coverage)
        out += ["", f"<details><summary>{coverage.engine}: never-executed request-layer code</summary>", ""]
        for path in coverage.files:
            for span in coverage.spans(path):
                out.append(f"{path}, {_span_label(span)}:")
                out.extend(md.code_block(span["text"], coverage.language))
        out += ["", "</details>", ""]
    return "\n".join(out)


def engine_json(coverages: dict) -> str:
    return json.dumps({"engines": {name: c.record() for name, c in coverages.items()}},
                      indent=2, sort_keys=True, ensure_ascii=False) + "\n"
