"""Which models mistral-common takes: the rule its registry entry names (`applies`),
read by config/engine_matrix.py from models.yaml alone, never from a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.config.models import ModelSpec


def tekken_only(model: ModelSpec) -> str | None:
    """mistral-common encodes with a tekken file: models whose tokenizer is one (a surrogate
    built on NeMo's adds tokens the tekken file does not have)."""
    if model.tokenizer.kind == "pack" and model.tokenizer.value == "mistral-common:tekken" and not model.surrogate:
        return None
    return "mistral-common encodes Mistral models (a tekken tokenizer) only"
