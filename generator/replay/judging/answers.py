"""An engine's answer to a request, as the judge and the ledger's recording ask for it.

Asking is apart from judging: `answer` is what the engine's own endpoint gives (ids, a prompt
count, or a refusal), `judged` what `check` judges (the serving path's answer where it returns
ids, as vLLM's /v1/chat/completions does), `serve` the serving path's answer beside a stand-in
endpoint (llama-server's /apply-template + /tokenize, vLLM's /tokenize). Any other failure of the
engine (an EngineError) propagates: that is no answer at all.
"""

from __future__ import annotations

from generator.config import engine_registry
from generator.engines import Engine, Ids, PromptCount, Refused, Served

Answer = Ids | PromptCount | Refused  # what an engine made of a request: ids, a count, or a refusal


def answer(engine: Engine, request: dict) -> Answer:
    """The engine's answer to a request: its ids, or the Refused it raised. Any other failure
    (an EngineError) propagates: that is no answer at all."""
    try:
        got = engine.ids(request)
    except Refused as refusal:
        return refusal
    return got if isinstance(got, PromptCount) else Ids.of(got)


def judged(engine: Engine, request: dict) -> Answer:
    """What `check` judges for a request: the serving path's answer where it returns ids (or
    refuses), as vLLM's /v1/chat/completions does, else the engine's own answer."""
    got = answer(engine, request)
    served = serve(engine, request, got)
    serving = served.answer() if served is not None else None
    return serving if serving is not None else got


def stand_in_name(engine: Engine) -> str:
    """The stand-in endpoint the engine's registry entry declares, as reports name it."""
    return engine_registry.capabilities(engine.name).stand_in or "stand-in"


def serve(engine: Engine, request: dict, got: Answer) -> Served | None:
    """The serving path's answer, for an engine whose registry entry declares a stand-in and
    that reads one now (vLLM's managed render server does not: its render endpoint is the
    serving path's own renderer, `reads_stand_in` False)."""
    if not engine_registry.capabilities(engine.name).stand_in or not getattr(engine, "reads_stand_in", True):
        return None
    return engine.serve(request, None if isinstance(got, (Refused, PromptCount)) else list(got))

