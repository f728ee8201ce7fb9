"""The built-in families' committed catalogue (generator/data/families.json) made again from the
pinned llama.cpp source: config/families.py reads the catalogue and derives families from a
templates folder; fetching the pinned source is this stage's.
"""

from __future__ import annotations

import json
from pathlib import Path

from generator import files
from generator.config import families
from generator.sources import pack


def pinned_templates_dir() -> Path:
    """models/templates/ of the pinned llama.cpp source (fetched on first use)."""
    return pack.llama_cpp_source() / "models" / "templates"


def dumps(built: list[families.Family]) -> str:
    """The catalogue's text: the llama.cpp build it was derived from, and every family."""
    document = {"llama_cpp_build": pack.LLAMA_CPP_BUILD, "families": [f.as_dict() for f in built]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def write(path: Path = families.CATALOGUE) -> bool:
    """Rewrite the committed catalogue from the pinned source; True when it changed."""
    return files.atomic_write(path, dumps(families.build(pinned_templates_dir())))
