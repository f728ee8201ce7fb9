"""`goldens check`, `report merge`, `bisect` and `history`: the replay stage's commands,
importable; cli.py only parses their options.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from generator.errors import GoldensError


def check_command(config_path: Path, engines: tuple[str, ...], model_names: tuple[str, ...], urls: tuple[str, ...],
                  root: Path, jobs: int, junit_path: Path | None, report_path: Path | None,
                  served: tuple[str, ...], headers: tuple[str, ...], api_key_env: str | None, timeout: float,
                  request_timeout: float, no_confirm: bool, results_path: Path | None, as_json: bool,
                  shard_text: str | None, durations_path: Path | None, store_durations: Path | None,
                  with_coverage: bool, axis: str = "both") -> None:
    """Replay goldens through engines; exit 0 all match, 1 drift, 2 could not judge."""
    from generator.config import models
    from generator.goldens import staleness
    from generator.progress import progress_bar
    from generator.replay.running import check as checking
    from generator.replay.running import orphans, remote_options, shard
    from generator.replay.reporting import destination, publish
    from generator.replay.judging import gate
    from generator.replay.reporting import results as results_data

    config = models.load(config_path)
    url_map = remote_options.urls(urls)
    if "" in url_map:
        if len(engines) != 1:
            raise GoldensError("--url without ENGINE= needs exactly one --engine")
        url_map[engines[0].partition("@")[0]] = url_map.pop("")
    connection = remote_options.connection(config, model_names, served, headers, api_key_env, jobs)
    model_names = model_names or tuple(connection.served)
    work = checking.plan(config, engines, model_names, url_map)
    groups = checking.groups(config, work, axis, url_map)
    only, part = shard.select(groups, shard_text, durations_path)
    destination.check_destination(junit_path, report_path, results_path, store_durations)
    checking.refuse_unavailable(config, groups, [i for i in range(len(groups)) if only is None or i in only], url_map)
    stale = staleness.find(config, root, [m for m, _ in work])  # before any verdict: an edit is not drift
    if stale:
        for item in stale:
            click.echo(f"goldens: error: {item.line()}", err=True)
        sys.exit(2)
    if only is not None and not only:
        shard.empty(config, work, groups, part, no_confirm, junit_path, report_path, results_path, as_json, axis,
                    url_map)
    remote_options.probe(url_map, request_timeout)
    total = sum(len(groups[i][2]) for i in range(len(groups)) if only is None or i in only)
    with destination.claim(junit_path, report_path, results_path), progress_bar(total, "replaying") as advance:
        results = checking.run(config, root, engines, model_names, url_map, jobs, advance=advance,
                               note=lambda message: click.echo(message, err=True),
                               confirm=not no_confirm, timeout=timeout, request_timeout=request_timeout,
                               connection=connection, only=only, shard=part, axis=axis)
        if with_coverage:
            from generator.coverage.trace import coverage_records

            results.coverage = coverage_records(config, sorted({g[0] for i, g in enumerate(groups)
                                                                if only is None or i in only}))
        gate.apply(results, config.gate)  # models.yaml's `gate:`: classes of known divergence that fail
        results.notes += orphans.note(config, root, [m for m, _ in work])  # files no case judges
        publish.write_files(results, junit_path, report_path, results_path)
        if store_durations is not None:
            destination.write(store_durations, shard.merged_durations(store_durations, results.durations()))
    code = publish.tell(results, root, click.echo, quiet=as_json)
    if as_json:
        click.echo(results_data.dumps(results), nl=False)
    sys.exit(code)


def report_merge_command(results_paths: tuple[Path, ...], root: Path, junit_path: Path | None, report_path: Path | None,
                         results_path: Path | None, step_summary: bool) -> None:
    """Merge the --results of `check --shard K/N` runs into the reports one unsharded run writes;
    exit with the merged verdict (2 when a shard is missing, named)."""
    from generator.replay.reporting import destination, publish
    from generator.replay.reporting import results as results_data

    if step_summary and not os.environ.get("GITHUB_STEP_SUMMARY"):
        raise GoldensError("--step-summary: GITHUB_STEP_SUMMARY is not set")
    destination.check_destination(junit_path, report_path, results_path)
    merged, problems, failures = results_data.merge(results_paths)
    merged.notes += [f"not merged: {problem}" for problem in problems]
    with destination.claim(junit_path, report_path, results_path):
        publish.write_files(merged, junit_path, report_path, results_path)
    code = publish.tell(merged, root, click.echo, step_summary=step_summary)
    for problem in problems:
        click.echo(f"goldens: error: {problem}", err=True)
    for failure in failures:
        click.echo(f"goldens: error: {failure}", err=True)
    sys.exit(2 if problems else code)


def bisect_command(config_path: Path, engine_name: str, good: str, bad: str, model_names: tuple[str, ...],
                   case_ids: tuple[str, ...], jobs: int, as_json: bool) -> None:
    """Binary search over the published releases from --good to --bad for the first whose ids
    differ from --good's; exit 0 found, 1 good and bad agree, 2 bad input."""
    from generator.config import engine_spec, models
    from generator.replay.releases import bisect

    config = models.load(config_path)
    name = engine_spec.parse(engine_name).name
    if "@" in engine_name:
        raise GoldensError(f"--engine {engine_name}: bisect takes the versions from --good and --bad")
    good = engine_spec.normalize(name, good, "--good")
    bad = engine_spec.normalize(name, bad, "--bad")
    report = None
    if as_json:
        from generator import documents

        def report(document: dict) -> None:
            click.echo(documents.dumps("bisect", document), nl=False)

    echo = (lambda line: click.echo(line, err=True)) if as_json else click.echo
    sys.exit(bisect.bisect(config, name, good, bad, model_names, case_ids, echo=echo,
                           note=lambda message: click.echo(message, err=True), jobs=jobs, report=report))


def history_command(config_path: Path, engine_name: str | None, first: str | None, last: str | None,
                    model_names: tuple[str, ...], case_ids: tuple[str, ...], jobs: int, exhaustive: bool,
                    as_json: bool, update_atlas: bool, atlas_dir: Path) -> None:
    """Every release from --from to --to after which some case's ids differ from the release
    before, by recursive k-ary search; exit 0 none changed, 1 some did, 2 bad input."""
    from generator.config import engine_registry as registry
    from generator.config import engine_spec, models
    from generator.replay.releases import history

    config = models.load(config_path)
    name = None
    if engine_name is not None:
        name = engine_spec.parse(engine_name).name
        if "@" in engine_name:
            raise GoldensError(f"--engine {engine_name}: history takes the versions from --from and --to")
        first = engine_spec.normalize(name, first, "--from") if first is not None else None
        last = engine_spec.normalize(name, last, "--to") if last is not None else None
    note = (lambda message: click.echo(message, err=True))
    echo = note if as_json else click.echo
    if update_atlas:
        from generator.replay.releases import atlas

        if as_json or case_ids or (model_names and name is None):
            raise GoldensError("--update-atlas runs the whole matrix (or with --engine, --model's cases of it); "
                               "it takes no --json or --case")
        atlas.update(config, atlas_dir, name, first, last, jobs=jobs, exhaustive=exhaustive, echo=echo, note=note,
                     models=model_names)
        sys.exit(0)
    if name is None or first is None or last is None:
        raise GoldensError("history needs --engine, --from and --to (or --update-atlas)")
    result = history.history(config, name, first, last, model_names, case_ids, jobs=jobs,
                             exhaustive=exhaustive, echo=echo, note=note)
    versions = registry.version_line(registry.lookup(name))
    for text in history.summary_lines(result, versions):
        echo(text)
    if as_json:
        from generator import documents

        click.echo(documents.dumps("history", history.document(result, versions)), nl=False)
    sys.exit(1 if result.changes else 0)
