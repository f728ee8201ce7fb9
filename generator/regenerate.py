"""Regenerate: models.yaml -> cases -> reference render -> golden files on disk.

Everything is resolved and rendered in memory first and written last, so bad input or an
unreachable source leaves goldens/ untouched; each write is atomic and skipped when the bytes
are equal, so a run with nothing changed writes nothing.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from generator import golden as golden_format
from generator import render as reference
from generator.cases import Case, model_cases
from generator.errors import GoldensError
from generator.models import Config, ModelSpec
from generator.sources import Source, resolve

REFERENCE_PACKAGES = ("transformers", "tokenizers", "jinja2")


@dataclass
class Summary:
    written: int = 0
    unchanged: int = 0
    removed: int = 0

    def __str__(self) -> str:
        return f"{self.written} written, {self.unchanged} unchanged, {self.removed} removed"


def versions() -> dict[str, str]:
    return {name: importlib.metadata.version(name) for name in REFERENCE_PACKAGES}


def provenance(source: Source, config: Config) -> dict[str, str]:
    return {
        "source": source.origin,
        "template": source.template_origin,
        "template_sha256": source.template_sha256,
        "tokenizer_sha256": source.tokenizer_sha256,
        "date": config.date.isoformat(),
        **versions(),
    }


def reference_golden(case: Case, source: Source, config: Config, stamp: dict[str, str]) -> golden_format.Golden:
    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    result = reference.render(tokenizer, source.template, case.request, config.date)
    item = golden_format.Golden(
        case=case.id, request=case.request, outcome=result.outcome, ids=result.ids,
        pieces=result.pieces, prompt=result.prompt, error=result.error, provenance=stamp,
    )
    annotate(case, source, config, item)
    return item


def annotate(case: Case, source: Source, config: Config, item: golden_format.Golden) -> None:
    """The analyses a golden records beside its ids, all by the reference: `roundtrip` on every
    golden; `control_tokens` where a user message spells control-token text; `requests` and
    `prefix_breaks` (+ `prefix_tail` when declared) where the request stands for a multi-turn
    conversation; `cache_busters` on the multi-turn shape (generator/prefix.py, roundtrip.py)."""
    if item.outcome != "ok":
        return
    from generator import prefix, roundtrip
    from generator.engines.transformers import TransformersEngine

    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    engine = TransformersEngine(source, config.date)
    item.extra["roundtrip"] = roundtrip.roundtrip_record(tokenizer, item.ids)
    if roundtrip.spelled_markers(case.request):
        item.extra["control_tokens"] = {engine.name: roundtrip.control_record(engine, case.request, tokenizer)}
    tail = config.models[case.model].prefix_tails.get(case.variant)
    if prefix.is_multi_request(case.request):
        result = prefix.check(engine, prefix.requests_of(case.request), tail)
        item.extra["requests"] = result.requests_record()
        item.extra["prefix_breaks"] = [b.record() for b in result.breaks]
        if tail is not None:
            item.extra["prefix_tail"] = {"tokens": tail.tokens, "reason": tail.reason}
    if case.shape == "multi-turn":
        kwargs = case.request.get("chat_template_kwargs") or {}
        item.extra["cache_busters"] = {
            r.buster.name: prefix.buster_record(r) for r in prefix.cache_busters(engine, kwargs, tail)
        }


def check_pins(model: ModelSpec, source: Source, config: Config, update: bool) -> None:
    """A pin that moved is an error naming both hashes, until the user re-pins on purpose."""
    actual = {"template_sha256": source.template_sha256, "tokenizer_sha256": source.tokenizer_sha256}
    for key, pinned in model.pins.items():
        if pinned == actual[key]:
            continue
        if not update:
            what = source.template_origin if key == "template_sha256" else source.origin
            raise GoldensError(
                f"{config.path.name}: models.{model.name}.pins.{key}: pinned {pinned[:12]}… but "
                f"{what} is now {actual[key][:12]}… ({actual[key]}); review it, then re-pin with --update-pins"
            )
        text = config.path.read_text(encoding="utf-8")
        config.path.write_text(re.sub(pinned, actual[key], text, count=1), encoding="utf-8")
        model.pins[key] = actual[key]


Progress = Callable[[str], None]


def build(config: Config, models: list[ModelSpec], update_pins: bool = False,
          advance: Progress | None = None,
          postprocess: Callable[[Case, Source, golden_format.Golden], None] | None = None,
          ) -> dict[str, golden_format.Golden]:
    """Every selected case's golden, keyed by case id; nothing touches the disk but pins."""
    sources = {}
    for model in models:
        sources[model.name] = resolve(model, config)
        check_pins(model, sources[model.name], config, update_pins)
    goldens = {}
    for model in models:
        source = sources[model.name]
        stamp = provenance(source, config)
        for case in model_cases(model):
            goldens[case.id] = reference_golden(case, source, config, stamp)
            if postprocess is not None:
                postprocess(case, source, goldens[case.id])
            if advance is not None:
                advance(case.id)
    return goldens


def write(out: Path, goldens: dict[str, golden_format.Golden], models: list[ModelSpec],
          all_models: bool, known_models: set[str]) -> Summary:
    """Write what changed; remove goldens (and their ledger entries) of cases no longer in the
    matrix, within the selected models (and, on a full run, directories of removed models)."""
    summary = Summary()
    for case_id, item in goldens.items():
        changed = golden_format.write_atomic(golden_format.golden_path(out, case_id), golden_format.dumps(item))
        if changed:
            summary.written += 1
        else:
            summary.unchanged += 1
    dirs = [out / m.name for m in models]
    if all_models and out.exists():
        dirs += [d for d in out.iterdir() if d.is_dir() and d.name not in known_models]
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.json")):
            stem = path.name.split(".", 1)[0]
            if f"{directory.name}/{stem}" in goldens:
                continue
            path.unlink()
            if golden_format.is_golden_file(path):
                summary.removed += 1
        if not any(directory.iterdir()):
            directory.rmdir()
    return summary


def regenerate(config: Config, out: Path, model_names: tuple[str, ...] = (), update_pins: bool = False,
               advance: Progress | None = None) -> Summary:
    models = config.select(model_names)
    goldens = build(config, models, update_pins=update_pins, advance=advance)
    return write(out, goldens, models, all_models=not model_names, known_models=set(config.models))
