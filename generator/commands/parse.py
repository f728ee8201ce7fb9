"""`goldens parse`: one parse case through the reference and engines, the output side's
counterpart of `render`.

The request file is a chat body whose last message is the assistant's (and, optionally, the raw
`output` text the model emitted): the reference makes its output ids and the message they should
parse to, each engine parses them whole and in every chunk plan, and each is judged as `goldens
check` judges a parse golden (replay/judging/parse/judge.py). Printed as text, or with --json one
document (goldens.parse/1); exit 0 when every engine parses it as expected, 1 when one does not,
2 when one could not be asked.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from generator.errors import GoldensError

FORMAT = "goldens.parse/1"


def _engines(model, names: tuple[str, ...]) -> list[str]:
    """The engines asked: those named, else the model's engines that parse its outputs."""
    from generator.config import engine_registry

    if names:
        for name in names:
            reason = engine_registry.parse_reason(name.partition("@")[0], model)
            if reason is not None:
                raise GoldensError(f"--engine {name}: {reason}")
        return list(names)
    chosen = [name for name in model.engines if engine_registry.parse_reason(name, model) is None]
    if not chosen:
        raise GoldensError(f"{model.name}: none of its engines parses outputs; name one with --engine")
    return chosen


def parse_command(config_path: Path, model_name: str, request_file: str, engine_names: tuple[str, ...],
                  urls: tuple[str, ...], as_json: bool, request_timeout: float) -> None:
    """One parse case, judged on every chosen engine; see the module docstring."""
    from generator import http
    from generator.config import models, parse_cases
    from generator.config.cases import PARSE, Case
    from generator.config.request import read_body
    from generator.engines import EngineError, reported_version
    from generator.engines.pool import EnginePool
    from generator.goldens import parse_goldens
    from generator.goldens.regenerate import provenance
    from generator.json_reader import load_json
    from generator.replay.running import remote_options
    from generator.replay.judging.parse import judge as parse_judge, observation
    from generator.sources.source import resolve

    config = models.load(config_path)
    (model,) = config.select([model_name])
    text, where = read_body(request_file)
    request = parse_cases.validate(load_json(text, where), where)
    request["chat_template_kwargs"] = {**model.kwargs, **request.get("chat_template_kwargs", {})}
    names = _engines(model, engine_names)
    url_map = remote_options.urls(urls)
    source = resolve(model, config)
    case = Case(model=model.name, shape="request", variant="", request=request, axis=PARSE)
    item = parse_goldens.golden(case, source, config, provenance(source, config))
    if item.outcome != "ok":
        raise GoldensError(f"{model.name}: no output ids for this case: {item.error}")
    plans = parse_cases.plans(len(item.ids))
    report: dict[str, Any] = {"format": FORMAT, "model": model.name, "output": {
        "tokens": [[i, p] for i, p in zip(item.ids, item.pieces)], "text": item.extra["output_text"],
        "how": item.extra["output"]}, "expected": item.extra["expected"], "engines": []}
    worst = 0
    transport = http.Transport.bounded(request=request_timeout)
    with EnginePool(config.date, url_map, on_start=lambda m: click.echo(m, err=True),
                    versions=config.engine_versions, transport=transport) as pool:
        for name in names:
            entry: dict[str, Any] = {"engine": name}
            try:
                engine = pool.engine(name, model, source)
                entry["version"] = reported_version(engine)
                observed = observation.observe(engine, item, plans)
            except (EngineError, GoldensError) as error:
                entry.update(status="error", detail=str(error))
                worst = 2
                report["engines"].append(entry)
                continue
            outcome = parse_judge.verdict(item, None, name, observed)
            entry.update(status=outcome.status, detail=outcome.detail, whole=observed.whole,
                         refused=observed.refused, plans=[
                             {"plan": plan.name, "sizes": list(plan.sizes), **observed.plans[plan.name]}
                             for plan in plans if plan.name in observed.plans])
            worst = max(worst, 0 if outcome.ok else 1)
            report["engines"].append(entry)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False, indent=2))
    else:
        for line in lines(report):
            click.echo(line)
    sys.exit(worst)


def lines(report: dict[str, Any]) -> list[str]:
    """The report as a person reads it: the output, the expected message, each engine's verdict."""
    tokens = report["output"]["tokens"]
    out = [f"output: {len(tokens)} ids ({report['output']['how'].get('from', '')}): "
           f"{json.dumps(report['output']['text'], ensure_ascii=False)}",
           f"expected: {json.dumps(report['expected'], ensure_ascii=False)}"]
    for entry in report["engines"]:
        plans = len(entry.get("plans") or [])
        what = f"whole + {plans} streamed plans" if plans else "not parsed"
        out.append(f"{entry['status'].upper():6} [{entry['engine']}] {what}"
                   + (f": {entry['detail']}" if entry.get("detail") else ""))
    return out
