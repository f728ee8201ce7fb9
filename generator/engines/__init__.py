"""Engines: every path that turns a chat request into the token ids a model sees.

One protocol, as small as the question it answers: a `name`, and `ids(request)` returning the
token ids (an engine may also say what it is with `version()`, see reported_version). Each engine lives in its own module; replay, prefix checks and reports never know
which one they are talking to.

A request is an OpenAI-style chat body, the same dict every engine receives:
    {"messages": [...], "tools": [...],                 # tools optional
     "chat_template_kwargs": {...},                     # optional
     "add_generation_prompt": True, "continue_final_message": False}
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from generator.errors import GoldensError

Request = dict[str, Any]


class Ids(list):
    """Token ids as a plain list (so `ids == golden_ids` just works), plus what the engine
    rendered on the way when it exposes it: the prompt string and per-token pieces."""

    def __init__(self, ids=(), prompt: str | None = None, pieces: list[str] | None = None):
        super().__init__(ids)
        self.prompt = prompt
        self.pieces = pieces


@runtime_checkable
class Engine(Protocol):
    """Which token ids does this request become on this engine?"""

    name: str

    def ids(self, request: Request) -> Ids: ...


def reported_version(engine: Engine) -> str:
    """What an engine says it is, for reports and ledger entries: an optional `version()`
    method (llama-server's /props build_info, vLLM's /version, a library's own version);
    "" when the engine has none or cannot say."""
    method = getattr(engine, "version", None)
    if method is None:
        return ""
    try:
        return str(method() or "")
    except GoldensError:
        return ""


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
