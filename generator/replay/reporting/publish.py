"""Where a check run's Results go: the report files, the terminal, GitHub Actions. One function
for `goldens check` and `goldens report merge`, so a merge of shards writes what one run writes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from generator.replay.reporting import destination, github, results as results_data, terminal
from generator.replay.reporting.junit import junit_xml
from generator.replay.reporting.markdown_report import markdown
from generator.replay.reporting.results import Results


def write_files(results: Results, junit_path: Path | None, report_path: Path | None,
                results_path: Path | None) -> None:
    summary = results.summary
    if junit_path is not None:
        destination.write(junit_path, junit_xml(summary, results.elapsed))
    if report_path is not None:
        destination.write(report_path, markdown(summary))
    if results_path is not None:
        destination.write(results_path, results_data.dumps(results))


def tell(results: Results, root: Path, echo: Callable[..., None], quiet: bool = False,
         step_summary: bool = False) -> int:
    """The terminal report (to stderr when `quiet`, stdout kept for --json), the error lines on
    stderr, then GitHub's summary and annotations; returns the exit code."""
    summary = results.summary
    out = (lambda line: echo(line, err=True)) if quiet else echo
    *problems, line = terminal.terminal(summary, colour=not quiet and terminal.use_colour(sys.stdout),
                                        errors=False)
    for text in problems:
        out(text)
    for text in terminal.error_lines(summary):
        echo(text, err=True)
    for text in summary.notes:
        out(text)
    for label, version in summary.versions().items():
        out(f"{label}: {version}")
    out(line)
    env = {**os.environ, "GITHUB_ACTIONS": "true"} if step_summary else None
    github.publish(markdown(summary), github.check_annotations(summary, root, env),
                   lambda text: echo(text, err=True), env)
    return summary.exit_code()
