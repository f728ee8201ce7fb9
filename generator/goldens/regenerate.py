"""Regenerate: models.yaml -> cases -> reference render -> golden files on disk.

Everything is resolved and rendered in memory first and written last, so bad input or an
unreachable source leaves goldens/ untouched; each write is atomic and skipped when the bytes
are equal, so a run with nothing changed writes nothing. A model whose inputs and goldens match
the index (generator/goldens/index.py) is not rendered at all: a run with nothing changed loads no tokenizer.

This module joins the steps, each one concern of its own: inputs.py (sources, pins, dialect
cases), render.py (one model's render), render_pool.py (where models render), writing.py (the
writes and stale files, the Summary), review.py (the findings said after a render).
"""

from __future__ import annotations

from pathlib import Path

from generator.analysis import capabilities
from generator.config.models import Config, ModelSpec
from generator.goldens import golden_file, index, parse_goldens
from generator.goldens.inputs import choose_dialects, resolve_sources
from generator.goldens.render import (  # noqa: F401 (the render, re-exported for its callers)
    REFERENCE_PACKAGES,
    annotate,
    provenance,
    reference_golden,
    render_model,
    versions,
)
from generator.goldens.render_pool import Progress, refuse_all_refused, render_models
from generator.goldens.review import disputed, invariant_review, read_back, same_ids
from generator.goldens.writing import Summary, write


def build(config: Config, models: list[ModelSpec], update_pins: bool = False,
          advance: Progress | None = None, workers: int | None = 1) -> dict[str, golden_file.Golden]:
    """Every selected case's golden, keyed by case id; nothing touches the disk but re-pins."""
    sources = resolve_sources(config, models, update_pins)
    models = choose_dialects(config, models, sources)
    rendered = render_models(config, [(model, sources[model.name]) for model in models], advance, workers)
    return {item.case: item for model in models for item in rendered[model.name]}


def regenerate(config: Config, out: Path, model_names: tuple[str, ...] = (), update_pins: bool = False,
               advance: Progress | None = None, force: bool = False, workers: int | None = 1,
               prune: bool = False, rechoose_dialects: bool = False, review: bool = False) -> Summary:
    """Render the models whose inputs changed since `out`'s index (all with `force`), write
    what changed, then record the index. A model skipped counts its goldens as unchanged.
    `workers`: see render_models (the command passes None). Dialect cases come from the lock
    file (choose_dialects; chosen anew with `rechoose_dialects`).
    The invariant review of every selected golden (and the cases that render another's ids)
    is said only when a model was rendered, or asked for with `review` (--write-invariants):
    a run with nothing to render reads no golden and says one line, whatever the matrix's size."""
    models = config.select(model_names)
    sources = resolve_sources(config, models, update_pins)
    models = capabilities.refresh(config, models, sources, full=not model_names)
    models = parse_goldens.refresh(config, models, sources)
    models = choose_dialects(config, models, sources, rechoose_dialects)
    saved = index.load(out)
    code, versions, cases_code = index.code_fingerprint(), index.library_versions(), index.cases_fingerprint()
    inputs, case_ids, stale = {}, {}, []
    for model in models:  # a memo hit each when nothing changed: no case built, no request hashed
        source = sources[model.name]
        inputs[model.name], case_ids[model.name] = index.inputs_and_cases(
            model, source, config, provenance(source, config), code, versions, cases_code)
        if force or not saved.fresh(model.name, inputs[model.name], case_ids[model.name], out):
            stale.append((model, source))
    if stale and advance is not None:  # nothing to render: no bar (progress.py makes it on first use)
        rendering = {model.name for model, _ in stale}
        for name in (model.name for model in models if model.name not in rendering):
            for case_id in case_ids[name]:
                advance(case_id)
    rendered = render_models(config, stale, advance, workers)
    refuse_all_refused(rendered)
    # None: a golden whose inputs and bytes on disk are what the index recorded; not rendered.
    goldens: dict[str, golden_file.Golden | None] = {}
    for model in models:
        if model.name in rendered:
            goldens.update((item.case, item) for item in rendered[model.name])
        else:
            goldens.update(dict.fromkeys(case_ids[model.name]))
    summary = write(out, goldens, models, all_models=not model_names, known_models=set(config.models),
                    prune=prune)
    for model, _ in stale:
        written = {item.case: golden_file.dumps(item) for item in rendered[model.name]}
        saved.record(model.name, inputs[model.name], written)
    if not model_names and prune:  # as their directories: left alone unless pruned
        saved.models = {name: entry for name, entry in saved.models.items() if name in config.models}
    index.save(out, saved)
    if not stale and not review:  # nothing rendered: every finding was said when it was rendered
        return summary
    every = read_back(out, goldens)
    review = invariant_review(every, models)
    summary.invariants = review.lines() + review.paste() + same_ids(every) + disputed(every, models)
    summary.proposed = review.proposed()
    return summary

