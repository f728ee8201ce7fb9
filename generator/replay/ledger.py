"""The reviewed-divergence ledger: committed per-engine expectations beside the goldens.

An entry is `goldens/<model>/<stem>.<engine>.json`, the golden format plus `engine` and `reason`:
an engine that still gives exactly those ids (or still refuses) passes; one that moves, or that
matches the reference again, is reported, so a fix upstream is noticed too.

A stand-in entry, `goldens/<model>/<stem>.<engine>.stand-in.json`, records the same for an engine's
stand-in endpoint (vLLM's /tokenize, llama-server's /apply-template + /tokenize) where it reviewed
as disagreeing with the engine's serving path: the stand-in's own ids, `stand_in` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator import files
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.divergence import divergence_point


@dataclass
class Entry:
    """A reviewed divergence: what `engine` gives for a case instead of the golden, and why."""

    case: str
    engine: str
    reason: str
    ids: list[int]
    pieces: list[str]
    prompt: str | None
    path: Path | None = None
    refused: str | None = None  # the engine's refusal, when what was reviewed is that it refuses
    engine_version: str | None = None  # what the engine reported when it was reviewed
    stand_in: str | None = None  # a stand-in entry: the stand-in endpoint it is about


STAND_IN = "stand-in"  # the last part of a stand-in entry's name


def entry_path(root: Path, case_id: str, engine: str, stand_in: bool = False) -> Path:
    return root / f"{case_id}.{engine}{'.' + STAND_IN if stand_in else ''}.json"


def read_stand_in(root: Path, case_id: str, engine: str) -> Entry | None:
    """The engine's reviewed stand-in entry for a case, if there is one."""
    return read(root, case_id, engine, stand_in=True)


def read(root: Path, case_id: str, engine: str, stand_in: bool = False) -> Entry | None:
    path = entry_path(root, case_id, engine, stand_in)
    if not path.exists():
        return None
    item = golden_file.read(path)
    reason = item.extra.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise GoldensError(f"{path}: a ledger entry needs a non-empty `reason`")
    if item.extra.get("engine") != engine:
        raise GoldensError(f"{path}: `engine` must be {engine!r}")
    endpoint = item.extra.get("stand_in")
    if stand_in and (not isinstance(endpoint, str) or not endpoint.strip()):
        raise GoldensError(f"{path}: a stand-in ledger entry needs `stand_in`, the endpoint it is about")
    return Entry(case=item.case, engine=engine, reason=reason, ids=item.ids, pieces=item.pieces,
                 prompt=item.prompt, path=path, refused=item.error if item.outcome == "error" else None,
                 engine_version=item.extra.get("engine_version"), stand_in=endpoint if stand_in else None)


def write(root: Path, golden: golden_file.Golden, engine: str, reason: str,
          ids: Sequence[int], pieces: Sequence[str], prompt: str | None,
          refused: str | None = None, engine_version: str = "", stand_in: str | None = None) -> Path:
    """Record a reviewed divergence beside its golden (same format, plus engine and reason);
    `refused` records that the engine declines a request the reference renders,
    `engine_version` what the engine reported itself as when it was reviewed, and `stand_in`
    makes it a stand-in entry about that endpoint."""
    index = None if refused else divergence_point(golden.ids, ids)
    entry = golden_file.Golden(
        case=golden.case, request=golden.request, outcome="error" if refused else "ok",
        ids=[] if refused else list(ids), pieces=[] if refused else list(pieces),
        prompt=None if refused else prompt, error=refused, provenance=golden.provenance,
        extra={"engine": engine, "engine_version": engine_version or None,
               **({"stand_in": stand_in} if stand_in else {}), "reason": reason, "diverges_at": index},
    )
    path = entry_path(root, golden.case, engine, stand_in=stand_in is not None)
    files.atomic_write(path, golden_file.dumps(entry), within=root)
    return path


def command(config_path: Path, engine_name: str, case_ids: tuple[str, ...], reason: str, url: str | None,
            root: Path, stand_in: bool, cause_name: str | None, edit_text: str | None,
            model_names: tuple[str, ...], replace_entries: bool, findings: tuple[str, ...] = ()) -> None:
    """`goldens ledger`: record a reviewed divergence: the engine's own ids for a case, beside its
    golden, with a reason; or with --cause, one edit the engine makes on every case of the models
    named."""
    import click

    from generator import redaction, reference
    from generator.config import models
    from generator.config.cases import case_of, model_cases, replays
    from generator.engines.pool import EnginePool
    from generator.replay import causes
    from generator.replay.judge import load_goldens, record, record_cause
    from generator.sources.source import resolve

    redaction.register(*redaction.url_secrets(url or ""))
    config = models.load(config_path)
    if findings:
        if cause_name is None or edit_text or stand_in or not model_names:
            raise GoldensError("--finding records a parse cause: give --cause NAME and --model (and --case "
                               "patterns to limit it), not --edit or --stand-in")
        from generator.replay import parse_judge

        config.select(list(model_names))
        with EnginePool(config.date, {engine_name.partition("@")[0]: url} if url else None,
                        versions=config.engine_versions, on_start=lambda m: click.echo(m, err=True)) as pool:
            path, explained = parse_judge.record_cause(root, config, pool, cause_name, findings, engine_name,
                                                       model_names, reason, case_ids)
        click.echo(f"recorded {path}: explains {len(explained)} parse case{'s' if len(explained) != 1 else ''}: "
                   f"{', '.join(explained)}")
        return
    if cause_name is not None:
        if case_ids or stand_in or not edit_text or not model_names:
            raise GoldensError("--cause records one edit for whole models: give --edit and --model, not --case "
                               "or --stand-in")
        causes.check_name(cause_name)
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
                for item in load_goldens(root, ids):
                    click.echo(f"recorded {record(engine, item, root, reason, stand_in=stand_in)}")
            return
        per_model = []
        for model_name in model_names:
            model, source = config.models[model_name], resolve(config.models[model_name], config)
            ids = [c.id for c in model_cases(model) if replays(c, engine_name.partition("@")[0])]
            per_model.append((model_name, pool.engine(engine_name, model, source), load_goldens(root, ids)))
        tokenizer = reference.load_tokenizer(resolve(config.models[model_names[0]], config).tokenizer_dir)
        edit = causes.parse(edit_text, lambda ids: reference.pieces(tokenizer, ids))
        path, explained, redundant = record_cause(root, cause_name, edit, engine_name.partition("@")[0],
                                                  per_model, reason, replace_entries)
        click.echo(f"recorded {path}: {edit.describe()} explains {len(explained)} case"
                   f"{'s' if len(explained) != 1 else ''}: {', '.join(explained)}")
        for entry in redundant:
            click.echo(f"{'removed' if replace_entries else 'not needed any more'}: {entry} (the cause explains it)")
