"""Engines: every path that turns a chat request into the token ids a model sees.

One protocol, as small as the question it answers: a `name`, `ids(request)` returning the token
ids, `version()` saying what it is ("" when it cannot) and `close()`; EngineBase gives the last
two for an engine with nothing to say or release. Each engine lives in its own folder here
(engines/<name>/engine.py, beside its server, worker, coverage layer and which-models rule) and
is built by the factory its entry in config/engine_registry.py names, from an EngineContext; replay,
prefix checks and reports never know which one they are talking to. An engine that cannot see
the ids (a server reporting only usage.prompt_tokens) returns a PromptCount instead, which replay
judges as a count and says so. An engine whose registry entry declares a `stand_in` endpoint
(llama-server's /apply-template + /tokenize, vLLM's /tokenize) is a StandIn: it offers
`serve(request, ids) -> Served`, what its serving path fed the model, so `goldens check` can
confirm the stand-in on every case.

A request is an OpenAI-style chat body, the same dict every engine receives:
    {"messages": [...], "tools": [...],                 # tools optional
     "chat_template_kwargs": {...},                     # optional
     "add_generation_prompt": True, "continue_final_message": False}
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from generator.errors import EngineError, GoldensError, Refused, Unreachable  # noqa: F401  (the engine API)

if TYPE_CHECKING:
    from generator.sources.source import Source

Request = dict[str, Any]
Decode = Callable[[Sequence[int]], list[str]]  # ids -> one piece per id (the reference's tokenizer)


class Ids(list):
    """Token ids as a plain list (so `ids == golden_ids` just works), plus what the engine
    rendered on the way when it exposes it: the prompt string and per-token pieces."""

    def __init__(self, ids=(), prompt: str | None = None, pieces: list[str] | None = None):
        super().__init__(ids)
        self.prompt = prompt
        self.pieces = pieces

    @classmethod
    def of(cls, answer: Sequence[int]) -> Ids:
        """An engine's answer as Ids: as it is when it is one, else the bare ids (a plugin may
        return a plain list), so readers never probe an answer for what it carries."""
        return answer if isinstance(answer, Ids) else cls(answer)


def pieces_of(ids: Sequence[int], decode: Decode | None = None, *,
              given: Sequence[str] | None = None) -> list[str]:
    """One piece per id: the engine's own (`given`, else `ids.pieces`) when there is one per id,
    else `decode(ids)`, else an empty string per id. Engines that return pieces show what they
    tokenized; the others are shown through the reference's tokenizer when one is at hand."""
    from generator.redaction import redact_pieces  # a secret a server spells out across pieces

    pieces = given if given is not None else Ids.of(ids).pieces
    if pieces is not None and len(pieces) == len(ids):
        return redact_pieces(pieces)
    return redact_pieces(decode(list(ids))) if decode is not None else [""] * len(ids)


def sent_tools(request: Request) -> dict[str, Any]:
    """`tools` for an engine's body as the request has them, `[]` too (each server decides what an
    empty list means: vLLM refuses it, llama-server renders no tools); nothing when absent or null."""
    return {"tools": request["tools"]} if request.get("tools") is not None else {}


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

    def ids(self, request: Request) -> Ids | PromptCount: ...

    def version(self) -> str: ...

    def close(self) -> None: ...


@runtime_checkable
class StandIn(Engine, Protocol):
    """An engine whose ids come from an endpoint standing in for serving (its registry entry's
    `stand_in`): `serve` says what the serving path fed the model for the same request."""

    def serve(self, request: Request, ids: list[int] | None) -> Served: ...


class EngineBase:
    """The defaults of the Engine protocol for an engine with no version to report and nothing
    to release."""

    name: str

    def version(self) -> str:
        return ""

    def close(self) -> None:
        """Nothing to release: connections are http.py's, kept alive per thread."""


class VersionLine(Protocol):
    """How an engine's versions are made ready (the `line` a registry entry's Versions names).
    `published` and `require_published` are needed only when the entry's Versions says `bisect`;
    `ready` and `cached` then too, and when its Server says `prepare`."""

    def default(self) -> str:
        """The version run when neither --engine NAME@V nor models.yaml names one."""

    def require(self, version: str) -> None:
        """One-line GoldensError, before anything starts, for a version that cannot run here."""

    def published(self) -> list[str]:
        """Every published release, oldest first (for bisect)."""

    def require_published(self, version: str) -> None: ...

    def order(self, version: str) -> Any:
        """A sort key: a build number, a PEP 440 Version."""

    def ready(self, version: str, jobs: int | None = None) -> tuple[float, str]:
        """Build or install it now: (seconds spent, "cached" or what was done); `jobs` is a
        build's share of the cores (None: all of them)."""

    def cached(self, version: str) -> bool:
        """Whether `ready` has nothing to do (bisect shares the cores only among the others)."""

    def label(self, version: str) -> str:
        """How bisect prints it: "b11434", "5.21.0"."""

    def release_url(self, version: str) -> str | None:
        """The release's published page (its tag), for `goldens history`; optional: a line
        without it gets None."""


@dataclass(frozen=True)
class EngineContext:
    """What an engine's factory is built with (its registry entry names the factory; a plugin's
    entry point in the `goldens.engines` group names it or an Entry).

    `source` is the golden model's resolved tokenizer directory and chat template (what the
    goldens were rendered from); `url` is the `--url NAME=URL` given for this engine (or for the
    engine it follows), if any; `served_model` the `--served-model` name for this golden model;
    `headers` the `--header` values plus the API key's Authorization header (secrets: never print
    them). `version` is the version to run (--engine NAME@V, else the models.yaml pin, else the
    default) for an engine that declares versions; `server()` starts (once per pool) and returns
    the managed server the entry declares, when no `url` is given."""

    name: str  # the engine name it is registered under; the engine's `name` must equal it
    model: str  # the golden model, e.g. "qwen3"
    source: Source
    date: _dt.date  # what strftime_now returns in the goldens' templates
    url: str | None = None
    served_model: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    jobs: int = 8  # requests goldens keeps in flight
    version: str | None = None
    processor: Any = None  # the model's processor settings (ModelSpec.processor), for media
    server: Callable[[], Any] | None = field(default=None, repr=False)
    connection: Any = field(default=None, repr=False)  # engines.remote.Connection: retries, redaction
    transport: Any = field(default=None, repr=False)  # generator.http.Transport: the run's deadlines (`until`)
    on_start: Callable[[str], None] = field(default=lambda message: None, repr=False)
    # the output side (engines/parse.py): this engine's parser names for the model (models.yaml
    # `parsers: {<engine>: {tool, reasoning, ...}}`) and the tokens the model ends a turn with
    parsers: dict[str, str] = field(default_factory=dict)
    end: tuple[str, ...] = ()

    @property
    def until(self) -> float | None:
        """The run's deadline (a time.monotonic() value, None without `--timeout`) that every
        render this engine does in-process must end by: the transport's, where a run keeps it,
        handed on to the reference's render functions and the render worker, never read from a
        process global (two runs in one process each keep their own)."""
        return getattr(self.transport, "until", None)

    def managed(self) -> Any:
        """The entry's managed server, started on first use."""
        if self.server is None:
            raise GoldensError(f"{self.name}: no managed server is declared for it; give --url {self.name}=URL")
        return self.server()


class PromptCount:
    """Count-level evidence: how many prompt tokens the engine evaluated, not which ones.

    Some servers report only a number (OpenAI-style usage.prompt_tokens, Ollama's
    prompt_eval_count). Replay compares it with the golden's length and marks the verdict as
    count-only. It is deliberately not a list: anything that needs the ids themselves (a ledger
    entry, a prefix check) gets an EngineError saying so when it tries to read them."""

    def __init__(self, tokens: int, where: str, field: str):
        self.tokens = tokens
        self.where = where  # "<engine> at <url><path>", for messages
        self.field = field  # where the number came from: "usage.prompt_tokens"

    def __iter__(self):
        raise EngineError(f"{self.where} returns only a prompt token count ({self.field} "
                          f"{self.tokens}), not token ids; this needs an engine that returns ids")

    def __repr__(self) -> str:
        return f"PromptCount({self.tokens}, {self.field})"


def reported_version(engine: Engine) -> str:
    """What an engine says it is, for reports and ledger entries (llama-server's /props
    build_info, vLLM's /version, a library's own version); "" when it cannot say."""
    try:
        return str(engine.version() or "")
    except GoldensError:
        return ""


@dataclass
class Served:
    """What an engine's serving path fed the model for one request, to confirm the stand-in
    endpoint its `ids` reads (`stand_in`, e.g. "/tokenize"): the prompt token count each serving
    endpoint reported, the prompt's ids where the endpoint returns them, or its refusal."""

    endpoint: str  # the serving endpoint, e.g. "/v1/chat/completions"
    counts: dict[str, int] = field(default_factory=dict)  # "endpoint field" -> prompt tokens
    ids: Ids | None = None
    refused: str | None = None

    def answer(self) -> Ids | Refused | None:
        """The serving path's own answer where it gives ids (or refuses), else None."""
        if self.refused is not None:
            return Refused(self.refused)
        return self.ids


MAX_TOKEN_ID = 2**31 - 1  # what tokenizers take (u32 in Rust, int32 in llama.cpp)


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
        if not 0 <= value <= MAX_TOKEN_ID:  # untrusted: a tokenizer would overflow on it
            shown = value if len(str(value)) <= 20 else f"an integer of {len(str(abs(value)))} digits"
            raise EngineError(f"{engine}: token {position} is {shown}, not a token id (0 to {MAX_TOKEN_ID})")
        out.append(value)
    return out
