"""`goldens regenerate`, `render` and `diff`: the goldens' commands, importable; cli.py only
parses their options.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from generator.errors import GoldensError


def regenerate_command(config_path: Path, out: Path, old_out: Path | None, model_names: tuple[str, ...],
                       update_pins: bool, prune: bool, force: bool, rechoose_dialects: bool = False,
                       write_invariants: bool = False) -> None:
    """Render the models whose inputs changed (every model with --force) and write the goldens
    that changed; remove only this matrix's own stale goldens and ledger entries, each named."""
    from generator.config import models
    from generator.config.cases import all_cases
    from generator.goldens import regenerate as regen
    from generator.progress import progress_bar

    out = old_out or out
    config = models.load(config_path)
    def total() -> int:
        return sum(len(all_cases(model)) for model in config.select(model_names))

    with progress_bar(total, "rendering") as advance:
        summary = regen.regenerate(config, out, model_names, update_pins=update_pins, advance=advance,
                                   force=force, workers=None, prune=prune,
                                   rechoose_dialects=rechoose_dialects, review=write_invariants)
    for line in summary.lines():
        click.echo(line)
    if write_invariants and summary.proposed:  # the review printed above, written into models.yaml
        from generator.analysis import invariants

        written = invariants.write_review(config.path, summary.proposed)
        click.echo(f"wrote the invariants: review of {', '.join(written)} into {config.path}; read each reason "
                   f"and say why the template may do it ({invariants.docs_url()})")


def render_command(config_path: Path, model_name: str, request_file) -> None:
    """Print the reference's ids, pieces and prompt for one request, as JSON, with what was
    normalized and the prompt's invariant findings (each also one line on stderr)."""
    from generator import reference
    from generator.analysis import invariants
    from generator.config import models
    from generator.config.request import carries_media, parse_request, read_body
    from generator.sources.source import resolve

    config = models.load(config_path)
    (model,) = config.select([model_name])
    request = parse_request(*read_body(request_file))
    source = resolve(model, config)
    request["chat_template_kwargs"] = {**model.kwargs, **request.get("chat_template_kwargs", {})}
    result = reference.render_request(source, request, config.date)  # expanded when it carries images
    if result.error is not None:
        raise GoldensError(f"{model_name}: the template refused this request: {result.error}")
    out = {"ids": result.ids, "pieces": result.pieces, "prompt": result.prompt}
    if result.normalization is not None:
        out["normalization"] = result.normalization
    if not carries_media(request):
        found = invariants.of(source.template, request, result.prompt or "")
        if found.record() is not None:
            out["invariants"] = found.record()
        for finding in found.findings:
            click.echo(f"goldens: invariant finding: {invariants.text(finding)}", err=True)
    click.echo(json.dumps(out, ensure_ascii=False, indent=2))


def diff_command(rev: str, root: Path, markdown: bool, report_path: Path | None, context: int, full: bool,
                 as_json: bool) -> None:
    """Token-level view of every golden changed against a git revision (default: HEAD): goldens
    whose tokens moved first, then one line per model for provenance- or analysis-only changes."""
    from generator.goldens import changes as changed_goldens, diff
    from generator.replay.reporting import destination, github

    destination.check_destination(report_path)
    from generator.goldens import bump

    changes = changed_goldens.changed(root, rev)
    per_model = bump.by_model(root, rev, changes) if changes else {}  # the template, BOS/EOS and their effect
    sources = [line for said in per_model.values() for line in said]
    page = diff.render_markdown(changes, rev, context, sources)
    if report_path is not None:
        destination.write(report_path, page)
    if as_json:
        from generator import documents

        click.echo(documents.dumps("diff", diff.document(changes, rev, per_model)), nl=False)
    else:
        click.echo(page if markdown else diff.render_text(changes, rev, context, full, sources), nl=False)
    github.publish(page, github.diff_annotations(changes), lambda line: click.echo(line, err=True))
