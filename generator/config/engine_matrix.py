"""The model x engine matrix: which engine replays which model, and why not where it does not.

Read from models.yaml (a model's `engines:`) and the engine registry's declared capabilities
(`applies`, `any_model`, `evidence`; an engine's rule lives in its folder, e.g.
generator/engines/harmony/applies.py), never from a run: `goldens engines --matrix` prints it, and
README's engines table is its output. A cell is `replayed` when the model lists the engine;
otherwise the reason it is not, numbered once below the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.config import engine_registry
from generator.config.models import Config, ModelSpec

REPLAYED = "replayed"


@dataclass(frozen=True)
class Cell:
    model: str
    engine: str
    replayed: bool
    why_not: str = ""  # empty when replayed


def why_not(info: engine_registry.EngineInfo, model: ModelSpec) -> str:
    """Why `model` is not replayed through the engine."""
    if info.applies is not None:
        reason = engine_registry.load(info.applies)(model)
        if reason:
            return reason
    if info.any_model:
        level = "a prompt token count" if info.evidence == "count" else "ids where the server returns them"
        return f"any server given --url ({level}); none runs here"
    return "not in the model's engines in models.yaml"


def matrix(config: Config) -> list[Cell]:
    """Every (model, usable engine) cell, models in file order, engines in registry order; a
    parse-only engine (renders False) replays no render case, so it has no column."""
    engines = [info for info in engine_registry.registered() if info.problem is None and info.renders]
    cells = []
    for model in config.models.values():
        for info in engines:
            listed = info.name in model.engines
            cells.append(Cell(model.name, info.name, listed, "" if listed else why_not(info, model)))
    return cells


PARSED = "parsed"


def parse_matrix(config: Config) -> list[Cell]:
    """The output side's cells: each (model, engine with a parse path), `replayed` when the
    engine parses the model's parse cases in `goldens check` (the model lists it and has parse
    cases, and the engine's rule takes the model), else why not."""
    cells = []
    for model in config.models.values():
        for info in engine_registry.registered():
            if info.problem is not None or not info.parses:
                continue
            reason = (engine_registry.parse_reason(info.name, model)
                      or ("no parse cases (models.yaml `parse:`)" if model.parse is None else None)
                      or (None if info.name in model.engines else "not in the model's engines in models.yaml"))
            cells.append(Cell(model.name, info.name, reason is None, reason or ""))
    return cells


SURROGATE_NOTE = ("surrogate: a built-in family rendered with the nearest real tokenizer plus its template's "
                  "special tokens; its findings are about templates and request layers, never tokenizers "
                  "(docs/families.md)")


def labels(config: Config) -> dict[str, str]:
    """Each model's name as the table shows it: a surrogate family's says so."""
    return {name: f"{name} (surrogate)" if model.surrogate else name for name, model in config.models.items()}


def markdown(cells: list[Cell], word: str = REPLAYED, labels: dict[str, str] | None = None) -> str:
    """One row per model, one column per engine; each reason numbered once below the table, and
    what a `(surrogate)` model is when one is in it."""
    labels = labels or {}
    engines = list(dict.fromkeys(cell.engine for cell in cells))
    models = list(dict.fromkeys(cell.model for cell in cells))
    reasons: dict[str, int] = {}
    by = {(cell.model, cell.engine): cell for cell in cells}
    lines = ["| model | " + " | ".join(engines) + " |", "| --- |" + " --- |" * len(engines)]
    for model in models:
        row = []
        for engine in engines:
            cell = by[(model, engine)]
            if cell.replayed:
                row.append(word)
            else:
                number = reasons.setdefault(cell.why_not, len(reasons) + 1)
                row.append(f"- ({number})")
        lines.append(f"| {labels.get(model, model)} | " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"({number}) {reason}" for reason, number in reasons.items()]
    if any(labels.get(model, model) != model for model in models):
        lines.append(SURROGATE_NOTE)
    return "\n".join(lines) + "\n"
