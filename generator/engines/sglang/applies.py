"""Which models SGLang takes: the rule its registry entry names (`applies`, `parse_applies`),
read by config/engine_matrix.py from models.yaml alone, never from a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.config.models import ModelSpec


def sglang_parsers(model: ModelSpec) -> str | None:
    """SGLang is asked a model's outputs through the parsers models.yaml names for it."""
    if model.parsers.get("sglang"):
        return None
    return "models.yaml names no SGLang parser for this model (parsers: {sglang: {tool, reasoning}})"
