"""Regenerate: models.yaml -> cases -> reference render -> golden files on disk.

Everything is resolved and rendered in memory first and written last, so bad input or an
unreachable source leaves goldens/ untouched; each write is atomic and skipped when the bytes
are equal, so a run with nothing changed writes nothing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from generator import files, reference
from generator.config import engine_registry
from generator.config.cases import EXPANDED_VIEW, Case, model_cases
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.sources import processor
from generator.sources.source import Source, resolve

REFERENCE_PACKAGES = ("transformers", "tokenizers", "jinja2")


@dataclass
class Summary:
    written: int = 0
    unchanged: int = 0
    removed: int = 0  # goldens and ledger entries, each listed in removed_paths
    removed_paths: list[tuple[Path, str]] = field(default_factory=list)  # (path, "golden" | "ledger entry")
    left_alone: list[Path] = field(default_factory=list)  # directories of models not in the config

    def __str__(self) -> str:
        return f"{self.written} written, {self.unchanged} unchanged, {self.removed} removed"

    def lines(self) -> list[str]:
        """What was removed, file by file, what was left alone, and the summary line last."""
        out = [f"removed {path} ({kind})" for path, kind in self.removed_paths]
        out += [f"left {path}/ alone: {path.name} is not in the config (--prune removes its goldens)"
                for path in self.left_alone]
        return [*out, str(self)]


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


def reference_golden(case: Case, source: Source, config: Config, stamp: dict[str, str]) -> golden_file.Golden:
    result = reference.render_request(source, case.request, config.date)
    item = golden_file.Golden(
        case=case.id, request=case.request, outcome=result.outcome, ids=result.ids,
        pieces=result.pieces, prompt=result.prompt, error=result.error, provenance=stamp,
    )
    annotate(case, source, config, item)
    return item


def annotate(case: Case, source: Source, config: Config, item: golden_file.Golden) -> None:
    """The analyses a golden records beside its ids, all by the reference: `roundtrip` on every
    golden; `control_tokens` where a user message spells control-token text; `requests` and
    `prefix_breaks` (+ `prefix_tail` when declared) where the request stands for a multi-turn
    conversation; `cache_busters` on the multi-turn shape (generator/analysis/).
    An expanded-view golden names its view and its processor instead: the analyses are about
    the template's text, which its template-view sibling already covers."""
    if case.view == EXPANDED_VIEW:
        spec = config.models[case.model].processor
        item.extra["view"] = EXPANDED_VIEW
        if spec is not None:
            item.extra["processor"] = {"origin": spec.origin, "sha256": processor.fingerprint(spec)}
        return
    if item.outcome != "ok":
        return
    from generator.analysis import busters, control_tokens, prefix, roundtrip
    from generator.engines.transformers import TransformersEngine

    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    engine = TransformersEngine(source, config.date)
    item.extra["roundtrip"] = roundtrip.record(tokenizer, item.ids)
    if control_tokens.spelled_markers(case.request):
        item.extra["control_tokens"] = {engine.name: control_tokens.record(engine, case.request, tokenizer)}
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
            r.buster.name: busters.record(r) for r in busters.cache_busters(engine, kwargs, tail)
        }


def moved_pins(model: ModelSpec, source: Source, config: Config, update: bool) -> list[tuple[str, str, str]]:
    """Pins that no longer match: an error naming both hashes unless the user re-pins on purpose;
    with --update-pins, the (model, key, new hash) to write once every source has resolved."""
    actual = {"template_sha256": source.template_sha256, "tokenizer_sha256": source.tokenizer_sha256}
    moved = []
    for key, pinned in model.pins.items():
        if pinned == actual[key]:
            continue
        if not update:
            what = source.template_origin if key == "template_sha256" else source.origin
            raise GoldensError(
                f"{config.path.name}: models.{model.name}.pins.{key}: pinned {pinned} but {what} "
                f"is now {actual[key]}; review the change, then re-pin with --update-pins"
            )
        moved.append((model.name, key, actual[key]))
    return moved


def rewrite_pins(config: Config, moved: list[tuple[str, str, str]]) -> None:
    """Replace exactly the pinned scalars in models.yaml (comments and layout kept), atomically."""
    if not moved:
        return
    text = config.path.read_text(encoding="utf-8")
    root = yaml.compose(text)
    spans = []
    for model, key, value in moved:
        node = _child(_child(_child(_child(root, "models"), model), "pins"), key)
        spans.append((node.start_mark.index, node.end_mark.index, value))
        config.models[model].pins[key] = value
    for start, end, value in sorted(spans, reverse=True):
        text = text[:start] + value + text[end:]
    files.atomic_write(config.path, text)


def _child(node, key: str):
    for key_node, value_node in node.value:
        if key_node.value == key:
            return value_node
    raise GoldensError(f"models.yaml: cannot find {key!r} to re-pin")


Progress = Callable[[str], None]


def build(config: Config, models: list[ModelSpec], update_pins: bool = False,
          advance: Progress | None = None) -> dict[str, golden_file.Golden]:
    """Every selected case's golden, keyed by case id; nothing touches the disk but re-pins."""
    sources, moved = {}, []
    for model in models:
        sources[model.name] = resolve(model, config)
        moved += moved_pins(model, sources[model.name], config, update_pins)
    rewrite_pins(config, moved)
    goldens = {}
    for model in models:
        source = sources[model.name]
        stamp = provenance(source, config)
        for case in model_cases(model):
            goldens[case.id] = reference_golden(case, source, config, stamp)
            if advance is not None:
                advance(case.id)
    return goldens


def write(out: Path, goldens: dict[str, golden_file.Golden], models: list[ModelSpec],
          all_models: bool, known_models: set[str], prune: bool = False) -> Summary:
    """Write what changed, then remove this matrix's own stale files: within the selected
    models' directories, goldens and ledger entries of cases no longer in the matrix. A file is
    removed only when it proves to be one (`owned`); anything else in --out is the user's. On a
    full run, directories of models absent from the config are left alone and reported, unless
    `prune` (another config pointed at the same --out must not empty it)."""
    summary = Summary()
    for case_id, item in goldens.items():
        changed = files.atomic_write(golden_file.golden_path(out, case_id), golden_file.dumps(item))
        if changed:
            summary.written += 1
        else:
            summary.unchanged += 1
    dirs = [out / m.name for m in models]
    if all_models and out.is_dir():
        absent = [d for d in sorted(out.iterdir())
                  if d.is_dir() and not d.is_symlink() and d.name not in known_models and owned(d)]
        if prune:
            dirs += absent
        else:
            summary.left_alone = absent
    for directory in dirs:
        if not directory.is_dir() or directory.is_symlink():
            continue
        for path, kind in owned(directory):
            if f"{directory.name}/{path.name.split('.', 1)[0]}" in goldens:
                continue
            try:
                path.unlink()
            except OSError as error:
                raise GoldensError(f"{path}: cannot remove this stale {kind} ({error.strerror})") from None
            summary.removed += 1
            summary.removed_paths.append((path, kind))
        with contextlib.suppress(OSError):  # emptied by us: tidy; anything else: leave it
            if not any(directory.iterdir()):
                directory.rmdir()
    return summary


def owned(directory: Path) -> list[tuple[Path, str]]:
    """The files of `directory` that are provably goldens' own: regular files named
    `<stem>.json` (a golden) or `<stem>.<engine>.json` (a ledger entry of a known engine) that
    read as valid goldens of this directory's model and case (golden_file.read checks the case
    against the path) and, for a ledger entry, name that engine. A user's notes.json is not."""
    out = []
    for path in sorted(directory.glob("*.json")):
        if path.is_symlink() or not path.is_file():
            continue
        parts = path.name[: -len(".json")].split(".")
        if len(parts) == 1:
            kind = "golden"
        elif len(parts) == 2 and engine_registry.NAME.match(parts[1]):
            kind = "ledger entry"
        else:
            continue
        try:
            item = golden_file.read(path)
        except GoldensError:
            continue
        if kind == "ledger entry" and item.extra.get("engine") != parts[1]:
            continue
        out.append((path, kind))
    return out


def regenerate(config: Config, out: Path, model_names: tuple[str, ...] = (), update_pins: bool = False,
               advance: Progress | None = None, prune: bool = False) -> Summary:
    models = config.select(model_names)
    goldens = build(config, models, update_pins=update_pins, advance=advance)
    refuse_all_refused(goldens)
    return write(out, goldens, models, all_models=not model_names, known_models=set(config.models),
                 prune=prune)


def refuse_all_refused(goldens: dict[str, golden_file.Golden]) -> None:
    """A model whose every case the template refuses would golden nothing and let every check
    pass on nothing: an error, before anything is written."""
    by_model: dict[str, list[golden_file.Golden]] = {}
    for item in goldens.values():
        by_model.setdefault(item.model, []).append(item)
    for model, items in by_model.items():
        if items and all(item.outcome == "error" for item in items):
            raise GoldensError(
                f"{model}: the template refused every case ({len(items)} of {len(items)}), so its "
                f"goldens would check nothing; the first: {items[0].case}: {items[0].error}"
            )
