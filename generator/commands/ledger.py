"""`goldens ledger`: record a reviewed divergence, a cause, or an engine-defect's report
(the ledger itself is generator/replay/judging/ledger.py; recording replays through the judge)."""

from __future__ import annotations

import json
from pathlib import Path

from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging import causes


def command(config_path: Path, engine_name: str | None, case_ids: tuple[str, ...], reason: str | None,
            url: str | None, root: Path, stand_in: bool, cause_name: str | None, edit_text: str | None,
            model_names: tuple[str, ...], replace_entries: bool, klass: str | None = None,
            upstream: tuple[str, ...] = (), report_cause: str | None = None, as_json: bool = False,
            findings: tuple[str, ...] = ()) -> None:
    """`goldens ledger`: record a reviewed divergence: the engine's own ids for a case, beside its
    golden, with a reason and a class; or with --cause, one edit the engine makes on every case of
    the models named; --report CAUSE writes an engine-defect's report from one case's answer;
    with none of these, the ledger's causes and classes counted."""
    import click

    from generator import redaction, reference
    from generator.config import models
    from generator.config.cases import case_of, model_cases, replays
    from generator.engines.pool import EnginePool
    from generator.replay.reporting import defects
    from generator.replay.judging.recording import record, record_cause
    from generator.replay.judging.outcome import load_goldens
    from generator.sources.source import resolve

    if report_cause is None and engine_name is None and not (case_ids or cause_name or reason):
        data = defects.summary(root)
        if as_json:
            click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            click.echo("\n".join(defects.summary_lines(data)))
        return
    redaction.register(*redaction.url_secrets(url or ""))
    config = models.load(config_path)
    if report_cause is not None:
        _report(config, root, report_cause, case_ids, url)
        return
    if engine_name is None or not reason:
        raise GoldensError("recording needs --engine and --reason (and --class): what the engine does, and why")
    if findings:
        if cause_name is None or edit_text or stand_in or not model_names:
            raise GoldensError("--finding records a parse cause: give --cause NAME and --model (and --case "
                               "patterns to limit it), not --edit or --stand-in")
        from generator.replay.judging.parse import judge as parse_judge

        config.select(list(model_names))
        with EnginePool(config.date, {engine_name.partition("@")[0]: url} if url else None,
                        versions=config.engine_versions, on_start=lambda m: click.echo(m, err=True)) as pool:
            path, explained = parse_judge.record_cause(root, config, pool, cause_name, findings, engine_name,
                                                       model_names, reason, case_ids, klass, upstream)
        click.echo(f"recorded {path}: explains {len(explained)} parse case{'s' if len(explained) != 1 else ''}: "
                   f"{', '.join(explained)}")
        return
    if cause_name is not None:
        if case_ids or stand_in or not edit_text or not model_names:
            raise GoldensError("--cause records one edit for whole models: give --edit and --model, not --case "
                               "or --stand-in")
        causes.check_name(cause_name)
        if klass is None:
            raise GoldensError(f"--cause {cause_name}: give its --class ({', '.join(causes.CLASSES)})")
        config.select(list(model_names))
    elif edit_text or model_names or replace_entries:
        raise GoldensError("--edit, --model and --replace-entries go with --cause NAME")
    elif not case_ids:
        raise GoldensError("name the cases with --case M/SHAPE, or record a cause with --cause NAME")
    by_model: dict[str, list[str]] = {}
    for case_id in case_ids:
        case = case_of(config, case_id)
        by_model.setdefault(case.model, []).append(case.id)
    config.select(list(by_model))
    with EnginePool(config.date, {engine_name.partition("@")[0]: url} if url else None, versions=config.engine_versions,
                    on_start=lambda message: click.echo(message, err=True)) as pool:
        if cause_name is None:
            for model_name, ids in by_model.items():
                model = config.models[model_name]
                engine = pool.engine(engine_name, model, resolve(model, config))
                for item in as_judged(model, load_goldens(root, ids), refuse=True):
                    click.echo(f"recorded {record(engine, item, root, reason, stand_in=stand_in, klass=klass, upstream=upstream)}")
            return
        per_model = []
        for model_name in model_names:
            model, source = config.models[model_name], resolve(config.models[model_name], config)
            ids = [c.id for c in model_cases(model) if replays(c, engine_name.partition("@")[0])]
            per_model.append((model_name, pool.engine(engine_name, model, source),
                              as_judged(model, load_goldens(root, ids), refuse=False)))
        tokenizer = reference.load_tokenizer(resolve(config.models[model_names[0]], config).tokenizer_dir)
        edit = causes.parse(edit_text, lambda ids: reference.pieces(tokenizer, ids))
        path, explained, redundant = record_cause(root, cause_name, edit, engine_name.partition("@")[0],
                                                  per_model, reason, replace_entries, klass=klass, upstream=upstream)
        click.echo(f"recorded {path}: {edit.describe()} explains {len(explained)} case"
                   f"{'s' if len(explained) != 1 else ''}: {', '.join(explained)}")
        for entry in redundant:
            click.echo(f"{'removed' if replace_entries else 'not needed any more'}: {entry} (the cause explains it)")
        if klass == "engine-defect" and not upstream:
            click.echo(f"an engine-defect with no --upstream: write its report to file with "
                       f"goldens ledger --report {cause_name}")


def as_judged(model, items: list[golden_file.Golden], refuse: bool) -> list[golden_file.Golden]:
    """The goldens as `check` judges them: a reviewed dispute's by the reference it names
    (replay/judging/disputes.py). A case still disputed has no expectation to record a divergence from:
    named by --case it is refused in one line, and a --cause leaves it out."""
    from generator.replay.judging import disputes

    out = []
    for item in items:
        view = disputes.judged_against(item, model.disputes)
        if view is None and refuse:
            raise GoldensError(f"{item.case}: {disputes.describe(item)}; review it before recording what an "
                               "engine does there")
        if view is not None:
            out.append(view)
    return out


def _report(config, root: Path, name: str, case_ids: tuple[str, ...], url: str | None) -> None:
    """`goldens ledger --report CAUSE [--case C]`: replay one case the cause covers (the first it
    lists, or --case) through its engine and write the report beside the cause file."""
    import click

    from generator.config.cases import case_of
    from generator import reference
    from generator.engines import PromptCount, Refused, reported_version
    from generator.engines.pool import EnginePool
    from generator.errors import stable_line
    from generator.replay.reporting import defects
    from generator.replay.judging.answers import judged
    from generator.replay.judging.outcome import load_goldens
    from generator.sources.source import resolve

    cause = causes.named(root, name)
    if cause is None:
        from generator.replay.judging.parse import causes as parse_causes

        parse_cause = parse_causes.named_cause(root, name)
        if parse_cause is not None:
            return _parse_report(config, root, parse_cause, case_ids, url)
        raise GoldensError(f"--report {name}: no reviewed cause of that name ({causes.path_of(root, name)})")
    if cause.klass != "engine-defect":
        raise GoldensError(f"--report {name}: a report is for an engine-defect; this cause's class is {cause.klass}")
    cases = list(case_ids) or [c for c in cause.cases if c.partition("/")[0] in config.models]
    if not cases:
        raise GoldensError(f"--report {name}: name a case it covers with --case M/SHAPE")
    case = case_of(config, cases[0])
    model = config.models[case.model]
    (item,) = load_goldens(root, [case.id])
    engine_name = cause.engines[0]
    with EnginePool(config.date, {engine_name: url} if url else None, versions=config.engine_versions,
                    on_start=lambda message: click.echo(message, err=True)) as pool:
        engine = pool.engine(engine_name, model, resolve(model, config))
        got = judged(engine, item.request)
        version = reported_version(engine)
    if isinstance(got, PromptCount):
        raise GoldensError(f"--report {name}: {engine_name} reports only a prompt token count")
    example = (defects.Example(item, [], [], refused=stable_line(got), version=version) if isinstance(got, Refused)
               else defects.Example(item, list(got), reference.pieces(reference.load_tokenizer(
                   resolve(model, config).tokenizer_dir), list(got)), version=version))
    if example.refused is None and not cause.explains(item.ids, example.ids, item):
        raise GoldensError(f"--report {name}: {engine_name}'s answer to {case.id} is not the cause's; name another --case")
    folder = cause.path.parent
    if cause.builtin and causes.BUILTIN.parents[2] / "goldens" != Path(root).resolve():
        folder = Path(root) / causes.FOLDER  # goldens' own cause, reported from a team's repository: kept there
    path = defects.write_report(folder, cause, example, Path(config.path).parent / "docs" / "atlas",
                                sorted(set(cause.cases) | set(cases)))
    click.echo(f"wrote {path}")


def _parse_report(config, root: Path, cause, case_ids: tuple[str, ...], url: str | None) -> None:
    """`goldens ledger --report CAUSE` for a parse cause (goldens/causes/parse/): replay a case it
    explains (--case, else the first it lists whose findings are the cause's alone, else the first
    that shows any of them; at most TRIED) through its engine, whole and in every plan, and write the
    report beside the cause file; the cause then names it."""
    import dataclasses

    import click

    from generator.config import engine_registry
    from generator.config.cases import case_of
    from generator.engines import reported_version
    from generator.engines.pool import EnginePool
    from generator.replay.reporting import defects
    from generator.replay.judging.outcome import load_goldens
    from generator.replay.judging.parse import causes as parse_causes, findings as parse_findings, observation
    from generator.sources.source import resolve

    if cause.klass != "engine-defect":
        raise GoldensError(f"--report {cause.name}: a report is for an engine-defect; this cause's class is {cause.klass}")
    cases = list(case_ids) or [c for c in cause.explains if c.partition("/")[0] in config.models][:TRIED]
    if not cases:
        raise GoldensError(f"--report {cause.name}: name a case it covers with --case M/parse/SHAPE")
    for case_id in cases:
        case = case_of(config, case_id)
        if case.model not in cause.models or not cause.applies(case.id):
            raise GoldensError(f"--report {cause.name}: {case.id} is not a case the cause covers")
    engine_name = cause.engines[0]
    chosen, shown = None, None
    with EnginePool(config.date, {engine_name: url} if url else None, versions=config.engine_versions,
                    on_start=lambda message: click.echo(message, err=True)) as pool:
        for case_id in cases:
            case = case_of(config, case_id)
            model = config.models[case.model]
            (item,) = load_goldens(root, [case.id])
            engine = pool.engine(engine_name, model, resolve(model, config))
            observed = observation.observe(engine, item)
            found = parse_findings.findings(item, observed)
            if set(found) & set(cause.findings):
                tried = (item, observed, model, engine, reported_version(engine))
                shown = shown or tried
                if set(found) <= set(cause.findings):
                    chosen = tried
                    break
    if (chosen or shown) is None:
        raise GoldensError(f"--report {cause.name}: {engine_name}'s parse of {', '.join(cases)} shows none of the "
                           "cause's findings; name another --case")
    item, observed, model, engine, version = chosen or shown
    parsers = {kind: model.parser(engine_name, kind) or "none" for kind in ("tool", "reasoning", "response")}
    route = (engine_registry.capabilities(engine_name).parse_route or f"{engine_name}'s parse path").format(**parsers)
    others = [c.name for c in parse_causes.covering(root, engine_name, model.name)
              if c.name != cause.name and c.applies(item.case)
              and set(c.findings) & set(parse_findings.findings(item, observed))]
    example = defects.ParseExample(item, observed, route, version=version, others=others)
    path = defects.write_report(cause.path.parent, cause, example, Path(config.path).parent / "docs" / "atlas",
                                sorted(set(cause.explains) | set(case_ids)))
    if cause.report != path.name:
        parse_causes.write_cause(root, dataclasses.replace(cause, report=path.name))
    click.echo(f"wrote {path} (from {item.case})")


TRIED = 8  # cases of a parse cause `--report` replays looking for one the cause alone explains
