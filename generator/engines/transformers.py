"""The installed Transformers, replayed against goldens made by the pinned one.

This is the check to run after upgrading transformers, tokenizers or jinja2: the same render
path as the reference (the processor's, for a request that carries media), on whatever
versions are installed now.
"""

from __future__ import annotations

import datetime as _dt

from generator import reference
from generator.engines import Ids, Refused, Request
from generator.sources.source import Source


class TransformersEngine:
    name = "transformers"

    def __init__(self, source: Source, date: _dt.date):
        self.source = source
        self.date = date
        self.tokenizer = reference.load_tokenizer(source.tokenizer_dir)

    def ids(self, request: Request) -> Ids:
        result = reference.render_request(self.source, request, self.date)
        if result.error is not None:
            raise Refused(f"{self.name}: template refused the request: {result.error}")
        return Ids(result.ids, prompt=result.prompt, pieces=result.pieces)
