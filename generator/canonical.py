"""The one spelling of a value as JSON where the text stands for the value: hashes, cache keys,
fingerprints, memo files. Keys sorted (a mapping's order says nothing), or kept where the order
is part of what is named (a request's keys: templates render tools with tojson, which keeps
them); never escaped to ASCII; Python's default separators. That is the spelling
tokenizer_sha256 (models.yaml pins, every golden's provenance) has always been taken over."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def dumps(value: Any, *, keep_order: bool = False) -> str:
    return json.dumps(value, sort_keys=not keep_order, ensure_ascii=False)


def digest(value: Any, *, keep_order: bool = False) -> str:
    """sha256 (hex) of the value's canonical text in UTF-8 (a lone surrogate kept as its bytes)."""
    return hashlib.sha256(dumps(value, keep_order=keep_order).encode("utf-8", "surrogatepass")).hexdigest()
