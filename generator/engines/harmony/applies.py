"""Which models harmony takes: the rule its registry entry names (`applies`, `parse_applies`),
read by config/engine_matrix.py from models.yaml alone, never from a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.config.models import ModelSpec


def gpt_oss_only(model: ModelSpec) -> str | None:
    """harmony renders o200k_harmony ids: gpt-oss models only (the engine checks the vocabulary
    when it opens; this is the matrix's reading of models.yaml)."""
    value = model.tokenizer.value.lower()
    if value == "npm:gptoss" or "gpt-oss" in value:
        return None
    return "harmony renders gpt-oss (o200k_harmony) only"
