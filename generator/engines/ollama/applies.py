"""Which models Ollama takes: the rule its registry entry names (`applies`),
read by config/engine_matrix.py from models.yaml alone, never from a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from generator.config.models import ModelSpec


def ollama_url(model: ModelSpec) -> str | None:
    """Ollama serves its own library, never this matrix's files: how it renders, for the matrix."""
    return ("a running Ollama given --url (a prompt token count; none runs here): it renders with its "
            "own Go renderers, and a GGUF with no hand-written one through llama-server's "
            "/apply-template (Ollama PR #16031)")
