"""The engines whose request layers coverage measures, and the measuring: each engine's files
and tracer come from its own folder's coverage module (generator/engines/<engine>/coverage.py,
building on generator/measure/), which the registry names (Entry.coverage); this module joins
them, so the registry is the only list of engines.

`reached(engine, model, bodies, config)` is the library entry other code builds on: each body's
set of reached (file, line) keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from generator.config import engine_registry
from generator.errors import GoldensError
from generator.measure.engine import EngineCoverage, Key, Layer


def layer(engine: str) -> Layer:
    """The request layer the registry declares for `engine` (loaded only now); an engine that
    declares none is one line naming those that do."""
    info = engine_registry.available().get(engine)
    if info is None or info.coverage is None:
        raise GoldensError(f"--engine {engine}: engine coverage measures {', '.join(engine_registry.measured())}")
    return engine_registry.load(info.coverage)


def _request(model, body: dict[str, Any], name: str) -> dict[str, Any]:
    """A body as the matrix sends it: validated like a request file, the model's kwargs under
    the body's own."""
    from generator.config.request import validate_request

    request = validate_request(json.loads(json.dumps(body)), name)
    return dict(request, chat_template_kwargs={**model.kwargs, **request["chat_template_kwargs"]})


def reached(engine: str, model: str, bodies: Sequence[dict[str, Any]], config) -> list[set[Key]]:
    """Per request body, the (file, line) keys of `engine`'s request layer it executed when
    `model`'s matrix sends it (validated like a request file, the model's kwargs added). One
    session per call: one server start for vLLM; for llama-server one start per body (gcov
    counts only what a whole process ran)."""
    from generator.sources.source import resolve

    spec = config.select((model,))[0]
    requests = [_request(spec, body, f"body {i}") for i, body in enumerate(bodies)]
    with layer(engine).session(spec, resolve(spec, config), config) as session:
        hits = session.run(requests)
    return hits  # a server's session fills them as it ends


def measure(engine: str, config, model_names: Sequence[str] = (), extra: dict[str, list[dict]] | None = None,
            on_model: Callable[[str], None] = lambda name: None) -> EngineCoverage:
    """What the matrix's cases of every selected model that replays through `engine` execute of
    its request layer (`extra`: more requests per model, already in matrix form)."""
    from generator.config.cases import model_cases
    from generator.sources.source import resolve

    chosen = layer(engine)
    models = [m for m in config.select(tuple(model_names)) if engine in m.engines]
    if not models:
        raise GoldensError(f"engine coverage: no selected model replays through {engine}")
    result: EngineCoverage | None = None
    for model in models:
        on_model(model.name)
        requests = [case.request for case in model_cases(model)] + list((extra or {}).get(model.name, ()))
        with chosen.session(model, resolve(model, config), config) as session:
            hits = session.run(requests, each=False)
        if result is None:
            result = EngineCoverage(engine, chosen.version(config), session.files, language=chosen.language)
        result.models.append(model.name)
        result.requests += len(requests)
        result.setup |= session.setup
        for keys in hits:
            result.hits |= keys
    assert result is not None
    return result
