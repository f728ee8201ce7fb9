"""`goldens check`: replay the matrix's goldens through chosen engines and collect outcomes.

Applicable means the engine is listed for the model in models.yaml. Models are replayed one at
a time and a model's managed servers are stopped before the next one starts, so a full matrix
fits the machine; a server given by URL is the user's and is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from generator import reference
from generator.config import engine_spec
from generator.config.cases import model_cases
from generator.config.engine_spec import EngineSpec
from generator.config.models import ENGINE_NAMES, Config
from generator.engines.pool import EnginePool, check_available
from generator.errors import GoldensError
from generator.replay.judge import Outcome, load_goldens, replay
from generator.sources.source import resolve


def plan(config: Config, engines: tuple[str, ...], models: tuple[str, ...],
         urls: dict[str, str] | None = None) -> list[tuple[str, list[EngineSpec]]]:
    """(model, engines to replay it through) for the selection; unknown names are errors.
    `llama-server@11000 llama-server@11434` replays a model listing llama-server through both;
    a version for an engine whose server a --url names is a contradiction."""
    specs = [engine_spec.parse(text, ENGINE_NAMES) for text in engines]
    for spec in specs:
        if spec.version is not None and spec.name in (urls or {}):
            raise GoldensError(f"--engine {spec.label}: a --url for {spec.name} already names the server")
    out = []
    for model in config.select(models):
        if specs:
            chosen = [spec for spec in specs if spec.name in model.engines]
        else:
            chosen = [EngineSpec(name) for name in model.engines]
        if chosen:
            out.append((model.name, chosen))
    if not out:
        raise GoldensError("nothing to check: no selected model lists the selected engine(s) in models.yaml")
    return out


def run(config: Config, root: Path, engines: tuple[str, ...] = (), models: tuple[str, ...] = (),
        urls: dict[str, str] | None = None, jobs: int = 8,
        advance: Callable[[str], None] | None = None,
        note: Callable[[str], None] | None = None) -> list[Outcome]:
    work = plan(config, engines, models, urls)
    for spec in dict.fromkeys(spec for _, specs in work for spec in specs):
        if spec.name not in (urls or {}):
            check_available(spec, config.engine_versions)
    outcomes: list[Outcome] = []
    with EnginePool(config.date, urls, on_start=note, versions=config.engine_versions) as pool:
        for model_name, engine_names in work:
            model = config.models[model_name]
            source = resolve(model, config)
            goldens = load_goldens(root, [case.id for case in model_cases(model)])
            tokenizer = reference.load_tokenizer(source.tokenizer_dir)
            decode = lambda ids: reference.pieces(tokenizer, list(ids))  # noqa: E731
            for spec in engine_names:
                engine = pool.engine(spec, model, source)
                outcomes += replay(engine, goldens, root, jobs=jobs, decode=decode, advance=advance,
                                   label=spec.label)
            pool.release(model_name)
    return outcomes


def exit_code(outcomes: list[Outcome]) -> int:
    if any(o.status == "error" for o in outcomes):
        return 2
    if any(o.status == "drift" for o in outcomes):
        return 1
    return 0


def versions(outcomes: list[Outcome]) -> dict[str, str]:
    """engine label -> the version it reported, in run order (one line each in the terminal)."""
    out: dict[str, str] = {}
    for outcome in outcomes:
        if outcome.version and outcome.engine not in out:
            out[outcome.engine] = outcome.version
    return out


def summary(outcomes: list[Outcome]) -> str:
    counts = {s: sum(1 for o in outcomes if o.status == s) for s in ("match", "known", "drift", "error")}
    return (f"{len(outcomes)} checked: {counts['match']} match, {counts['known']} known divergence, "
            f"{counts['drift']} drift, {counts['error']} error")
