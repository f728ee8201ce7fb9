"""`goldens coverage`, `requests search` and `requests import`, importable; cli.py only parses
their options.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


def coverage_command(config_path: Path, model_names: tuple[str, ...], report_path: Path | None, as_json: bool,
                     engine_names: tuple[str, ...]) -> None:
    """Per model, the share of its template's code the matrix's reference renders execute, and
    every never-executed span with its template lines and text. With --engine, the share of
    each engine's request layer (parsing, normalization, validation) the matrix's cases execute
    on the real engine, per file, with the never-executed spans (docs/engine-coverage.md)."""
    from generator.config import models
    from generator.coverage import report as coverage_report
    from generator.coverage.trace import model_coverage
    from generator.replay.reporting import destination
    from generator.sources.source import resolve

    destination.check_destination(report_path)
    config = models.load(config_path)
    if engine_names:
        from generator.coverage import engine_layers as engine_coverage

        for name in engine_names:
            engine_coverage.layer(name)  # an unknown engine is one line before anything starts
        note = (lambda name: click.echo(f"  tracing {name}", err=True))
        measured_engines = {name: engine_coverage.measure(name, config, model_names, on_model=note)
                            for name in dict.fromkeys(engine_names)}
        if report_path is not None:
            destination.write(report_path, coverage_report.engine_markdown(measured_engines))
        click.echo(coverage_report.engine_json(measured_engines) if as_json
                   else coverage_report.engine_text(measured_engines), nl=False)
        return
    measured = {model.name: model_coverage(model, resolve(model, config), config)
                for model in config.select(model_names)}
    if report_path is not None:
        destination.write(report_path, coverage_report.markdown(measured))
    click.echo(coverage_report.as_json(measured) if as_json else coverage_report.text(measured), nl=False)


def requests_search_command(config_path: Path, model_names: tuple[str, ...], out: Path,
                            engine_names: tuple[str, ...]) -> None:
    """Search request variations for ones that execute template code the matrix does not (and,
    with --engine, engine request-layer code), and write the minimal set that does (greedy
    cover) as request files; coverage before and after."""
    from generator.config import models
    from generator.coverage import engine_layers, search
    from generator.sources.source import resolve

    config = models.load(config_path)
    for name in engine_names:
        engine_layers.layer(name)
    for model in config.select(model_names):
        result = search.search(model, resolve(model, config), config, engines=tuple(dict.fromkeys(engine_names)))
        written = search.write_keepers(result, out)
        click.echo(f"{model.name}: {result.before.percent:.1f}% -> {result.after.percent:.1f}% "
                   f"({result.before.executed} -> {result.after.executed} of {result.after.executable} "
                   f"compiled lines); {len(result.kept)} of {result.tried} variations kept")
        for name, (before, after) in result.engines.items():
            click.echo(f"  {name} {before.version}: {before.percent:.1f}% -> {after.percent:.1f}% "
                       f"({before.executed} -> {after.executed} of {after.executable} request-time lines)")
        for (candidate, gain), path in zip(result.kept, written):
            outcome = "; ".join(sorted(set(candidate.outcomes)))
            click.echo(f"  +{gain:<3d} {path}  ({outcome})")


def requests_import_command(config_path: Path, log: str, out: Path, model_names: tuple[str, ...], redact: bool) -> None:
    """Logged OpenAI chat bodies (JSONL, or a folder of JSON files), or a pinned registry corpus
    (corpus:NAME), to the smallest set of request files that reaches everything the whole log
    reaches: each model's template code and the bodies' structure. A malformed entry is one
    error line; the rest are imported (exit 2 says some input was bad)."""
    from generator.config import models
    from generator.coverage import traffic
    from generator.errors import GoldensError

    config = models.load(config_path)
    if log.startswith("corpus:"):
        result = traffic.import_corpus(log.split(":", 1)[1], out, config, config.select(model_names))
    elif not Path(log).exists():
        raise GoldensError(f"{log}: no such file or folder")
    else:
        result = traffic.import_log(Path(log), out, config, config.select(model_names), redacting=redact)
    for error in result.errors:
        click.echo(f"goldens: error: {error}", err=True)
    click.echo(f"{result.read} bodies read, {len(result.kept)} kept"
               + (f", {len(result.errors)} malformed" if result.errors else "") + f" (in {out})")
    for name, coverage in result.coverage.items():
        click.echo(f"  {name}: the kept bodies execute {coverage.percent:.1f}% of its template "
                   f"({coverage.executed}/{coverage.executable} compiled lines)")
    if result.errors:
        sys.exit(2)
