"""What a render takes, made ready: each model's source with its pins checked, and its dialect
cases chosen (from the lock file, or by rendering each candidate with the reference).

Apart from the render itself (render.py) and the writes (writing.py): `goldens regenerate`, the
pytest plugin and the reference server's script resolve sources the same way.
"""

from __future__ import annotations

import re

from generator import reference
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
from generator.goldens import pins
from generator.sources.source import Source, resolve


def resolve_sources(config: Config, models: list[ModelSpec], update_pins: bool = False) -> dict[str, Source]:
    """Every selected model's source, pins checked (and, with update_pins, rewritten)."""
    sources, moved = {}, []
    for model in models:
        sources[model.name] = resolve(model, config)
        moved += pins.moved(model, sources[model.name], config, update_pins)
    pins.rewrite(config, moved)
    return sources


def choose_dialects(config: Config, models: list[ModelSpec], sources: dict[str, Source],
                    rechoose: bool = False) -> list[ModelSpec]:
    """The selected models with their dialect cases chosen: from the lock beside models.yaml
    (models.dialects.lock), or, for a model it holds no choice for (or every model with `rechoose`), by
    rendering each candidate with the reference (config/dialects.py `choose`) and writing the
    choice to the lock. config.models is updated in place; the returned list replaces `models`."""
    import dataclasses

    from generator.config import dialects

    todo = [m for m in models if m.dialects and (rechoose or m.dialect_cases is None)]
    if not todo:
        return models
    lock = dialects.read_lock(config.path)
    for model in todo:
        source = sources[model.name]
        matrix = [model.request(shape, model.kwargs) for shape in model.requests]
        try:
            kept = dialects.choose(model.shapes, model.dialects, model.kwargs,
                                   lambda request, source=source: reference.render_request(source, request, config.date),
                                   matrix, lambda request, rendered, source=source: finding_kinds(source, request, rendered),
                                   lambda request, source=source: _template_lines(source, request, config.date))
        except GoldensError as error:  # the render deadline, memory: this machine's, no choice
            raise GoldensError(f"{model.name}: choosing its dialect cases: {error}; nothing written") from None
        lock[model.name] = {"dialects": list(model.dialects), "cases": kept}
        config.models[model.name] = dataclasses.replace(model, dialect_cases=tuple(kept))
    lock = {name: entry for name, entry in lock.items() if name in config.models}
    dialects.write_lock(config.path, lock)
    return [config.models[m.name] for m in models]


def _template_lines(source: Source, request: dict, date) -> set[int]:
    """The compiled template lines a request executes (the derived dialects' choice)."""
    from generator.coverage.trace import render_traced

    return render_traced(source, request, date)[1]


def finding_kinds(source: Source, request: dict, rendered: reference.Rendered) -> list[str]:
    """The invariant findings of the reference's prompt for a request, each as its kind and what
    it says without positions (dialects' choice: a template that drops an assistant's text is
    another finding than one that drops the system prompt, though both drop a message)."""
    from generator.analysis import invariants

    found = invariants.of(source.template, request, rendered.prompt or "").findings
    return [f'{f["kind"]}: {re.sub(r"[0-9]+", "N", f["detail"])}' for f in found]

