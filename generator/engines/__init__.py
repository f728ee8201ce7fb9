"""Engines: every path that turns a chat request into the token ids a model sees.

One protocol, as small as the question it answers: a `name`, and `ids(request)` returning the
token ids. Each engine lives in its own module; replay, prefix checks and reports never know
which one they are talking to.

A request is an OpenAI-style chat body, the same dict every engine receives:
    {"messages": [...], "tools": [...],                 # tools optional
     "chat_template_kwargs": {...},                     # optional
     "add_generation_prompt": True, "continue_final_message": False}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from generator.errors import GoldensError

Request = dict[str, Any]
Decode = Callable[[Sequence[int]], list[str]]  # ids -> one piece per id (the reference's tokenizer)


class Ids(list):
    """Token ids as a plain list (so `ids == golden_ids` just works), plus what the engine
    rendered on the way when it exposes it: the prompt string and per-token pieces."""

    def __init__(self, ids=(), prompt: str | None = None, pieces: list[str] | None = None):
        super().__init__(ids)
        self.prompt = prompt
        self.pieces = pieces


def pieces_of(ids: Sequence[int], decode: Decode | None = None, *,
              given: Sequence[str] | None = None) -> list[str]:
    """One piece per id: the engine's own (`given`, else `ids.pieces`) when there is one per id,
    else `decode(ids)`, else an empty string per id. Engines that return pieces show what they
    tokenized; the others are shown through the reference's tokenizer when one is at hand."""
    pieces = given if given is not None else getattr(ids, "pieces", None)
    if pieces is not None and len(pieces) == len(ids):
        return list(pieces)
    return decode(list(ids)) if decode is not None else [""] * len(ids)


def first_divergence(a: Sequence, b: Sequence) -> int | None:
    """Index of the first position where a and b differ (a length difference counts); None if equal."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


@runtime_checkable
class Engine(Protocol):
    """Which token ids does this request become on this engine?"""

    name: str

    def ids(self, request: Request) -> Ids: ...


class EngineError(GoldensError):
    """An engine that could not answer: unreachable, HTTP error, malformed reply."""


class Refused(EngineError):
    """The engine answered, and its answer is that it will not render this request (a template
    that raises, an HTTP 400 naming the template error). A golden whose reference also refused
    expects exactly this."""


def strict_ids(engine: str, values: Any) -> list[int]:
    """Token ids exactly as sent: a bool, float or string is an error, never coerced."""
    if not isinstance(values, list):
        raise EngineError(f"{engine}: expected a list of token ids, got {type(values).__name__}")
    out: list[int] = []
    for position, value in enumerate(values):
        if type(value) is not int:
            raise EngineError(
                f"{engine}: token {position} is {value!r} ({type(value).__name__}), not an int"
            )
        out.append(value)
    return out
