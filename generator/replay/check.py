"""`goldens check`: replay the matrix's goldens through chosen engines and collect outcomes.

Applicable means the engine is listed for the model in models.yaml. Models are replayed one at
a time and a model's managed servers are stopped before the next one starts, so a full matrix
fits the machine; a server given by URL is the user's and is left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from generator import reference
from generator.config import engine_registry
from generator.config.cases import model_cases, replays
from generator.config.models import Config
from generator.engines.pool import EnginePool
from generator.engines.remote import Connection
from generator.errors import GoldensError
from generator.replay import report
from generator.replay.judge import Outcome, load_goldens, replay
from generator.sources.source import resolve


def plan(config: Config, engines: tuple[str, ...], models: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """(model, engines to replay it through) for the selection; unknown names are errors. An
    engine that serves any model (openai, ollama, a plugin) also applies to each model named
    explicitly, whether or not models.yaml lists it there."""
    anywhere = [name for name in engines if engine_registry.lookup(name).any_model]
    out = []
    for model in config.select(models):
        chosen = [e for e in model.engines if not engines or e in engines]
        chosen += [e for e in anywhere if models and e not in chosen]
        if chosen:
            out.append((model.name, chosen))
    if not out:
        hint = f" ({', '.join(anywhere)} serves any model: name it with --model)" if anywhere else ""
        raise GoldensError(f"nothing to check: no selected model lists the selected engine(s) in models.yaml{hint}")
    return out


def run(config: Config, root: Path, engines: tuple[str, ...] = (), models: tuple[str, ...] = (),
        urls: dict[str, str] | None = None, jobs: int = 8,
        advance: Callable[[str], None] | None = None,
        note: Callable[[str], None] | None = None,
        connection: Connection | None = None) -> list[Outcome]:
    work = plan(config, engines, models)
    outcomes: list[Outcome] = []
    with EnginePool(config.date, urls, on_start=note, connection=connection) as pool:
        for model_name, engine_names in work:
            model = config.models[model_name]
            source = resolve(model, config)
            cases = model_cases(model)
            goldens = dict(zip([c.id for c in cases], load_goldens(root, [c.id for c in cases])))
            tokenizer = reference.load_tokenizer(source.tokenizer_dir)
            decode = lambda ids: reference.pieces(tokenizer, list(ids))  # noqa: E731
            for engine_name in engine_names:
                engine = pool.engine(engine_name, model, source)
                chosen = [goldens[c.id] for c in cases if replays(c, engine_name)]
                outcomes += replay(engine, chosen, root, jobs=jobs, decode=decode, advance=advance)
            pool.release(model_name)
    return outcomes


def exit_code(outcomes: list[Outcome]) -> int:
    if any(o.status == "error" for o in outcomes):
        return 2
    if any(o.status == "drift" for o in outcomes):
        return 1
    return 0


def summary(outcomes: list[Outcome]) -> str:
    return report.summary_line(outcomes)
