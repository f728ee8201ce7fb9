"""`goldens prefix`: the multi-turn shapes of a model (or one recorded conversation) through one
engine, every break reported, exit 1 on a break outside the declared tail.

Importable so the command line stays a thin wrapper (cli.py parses options, `run` does the work).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

from generator import reference
from generator.analysis.busters import cache_busters
from generator.analysis.prefix import (
    Result,
    check,
    multi_turn_shapes,
    requests_of,
    tail_for,
    variant_of,
)
from generator.analysis.prefix_report import format_buster, format_result, side_by_side
from generator.config import engine_registry, engine_spec
from generator.config.models import Config
from generator.config.request import check_kwargs
from generator.engines import Request
from generator.errors import GoldensError
from generator.json_reader import load_json


def parse_kwargs(text: str | None) -> dict[str, Any] | None:
    """`--kwargs JSON`: a JSON object of chat-template kwargs, or None when not given."""
    if text is None:
        return None
    value = load_json(text, "--kwargs")
    if not isinstance(value, dict):
        raise GoldensError("--kwargs: expected a JSON object such as '{\"enable_thinking\": false}'")
    check_kwargs(value, "--kwargs")
    return value


def _with_kwargs(requests: list[Request], kwargs: dict[str, Any]) -> list[Request]:
    """Requests with the run's kwargs under each request's own (what the client sent wins)."""
    out = []
    for request in requests:
        request = copy.deepcopy(request)
        request["chat_template_kwargs"] = {**kwargs, **(request.get("chat_template_kwargs") or {})}
        out.append(request)
    return out


def run(config: Config, model_name: str, engine_name: str | Sequence[str] = engine_registry.REFERENCE,
        kwargs: dict | None = None,
        conversation: list[Request] | None = None, conversation_name: str = "conversation",
        url: str | None = None, busters: bool = False,
        echo: Callable[[str], None] = print, note: Callable[[str], None] | None = None) -> int:
    """`goldens prefix`: the multi-turn shapes (every variant, or the one --kwargs names) or one
    conversation, through one engine or several (`llama-server@11000 llama-server@11434`, then a
    table puts their breaks side by side); prints every request's length and every break with
    the tokens around it. Returns 1 when a break lies outside a declared tail, else 0."""
    from generator.engines.pool import EnginePool, check_available
    from generator.sources.source import resolve

    specs = [engine_spec.parse(name) for name in ([engine_name] if isinstance(engine_name, str) else engine_name)]
    (model,) = config.select([model_name])
    for spec in specs:
        if spec.name not in model.engines:  # as `goldens check`: another model's format means nothing here
            raise GoldensError(f"{model.name} does not list engine {spec.name!r} in {config.path.name} "
                               f"(its engines: {', '.join(model.engines)})")
    for spec in specs if not url else ():
        check_available(spec, config.engine_versions)
    source = resolve(model, config)
    decode = functools.partial(reference.pieces, reference.load_tokenizer(source.tokenizer_dir))

    if kwargs is not None:
        merged = {**model.kwargs, **kwargs}
        variant = variant_of(model, merged)
        runs = [(json.dumps(kwargs, sort_keys=True) if variant is None else variant or "default", merged)]
    elif conversation is not None:
        runs = [("", dict(model.kwargs))]
    else:
        runs = [(variant, {**model.kwargs, **vkw}) for variant, vkw in model.variants.items()]

    results: list[Result] = []
    urls = {specs[0].name: url} if url else None
    with EnginePool(config.date, urls=urls, on_start=note, versions=config.engine_versions) as pool:
        for spec in specs:
            engine = pool.engine(spec, model, source)
            if len(specs) > 1:
                echo(f"== {spec.label}")
            for variant, run_kwargs in runs:
                suffix = f" [{variant or 'default'}]" if variant or len(runs) > 1 else ""
                if conversation is not None:
                    requests = _with_kwargs(conversation, run_kwargs)
                    tail = tail_for(model, requests[0]["chat_template_kwargs"])
                    jobs = [(f"{model.name} {conversation_name}{suffix}", requests)]
                else:
                    tail = tail_for(model, run_kwargs)
                    jobs = [(f"{model.name}/{shape}{suffix}", requests_of(model.request(shape, run_kwargs)))
                            for shape in multi_turn_shapes(model)]
                for label, requests in jobs:
                    result = check(engine, requests, tail, label, decode)
                    result.engine = spec.label
                    results.append(result)
                    echo(format_result(result))
                if busters:
                    for item in cache_busters(engine, run_kwargs, tail, decode):
                        echo(format_buster(item))
    if len(specs) > 1:
        echo(side_by_side(results, [spec.label for spec in specs]))
    breaks = [b for r in results for b in r.breaks]
    undeclared = [b for b in breaks if not b.declared]
    echo(f"{len(results)} conversation(s), {sum(len(r.sent) for r in results)} requests: "
         f"{len(breaks)} break(s), {len(undeclared)} undeclared")
    judged = sum(max(0, sum(1 for s in r.sent if s.refused is None) - 1) for r in results)
    if not judged:  # every request refused (or one answered per conversation): nothing compared
        refusal = next((s.refused for r in results for s in r.sent if s.refused is not None), None)
        raise GoldensError(f"{model.name}: no request pair was judged on {', '.join(s.label for s in specs)}: "
                           + (f"the engine refused them, e.g. {refusal}" if refusal else "nothing to compare"))
    return 1 if undeclared else 0
