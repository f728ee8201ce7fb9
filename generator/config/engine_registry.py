"""Which engines exist: the built-in ones, and those installed packages register.

A package adds an engine by declaring an entry point in the `goldens.engines` group; its name is
the engine's name and its value names a callable (usually the engine class) that takes one
`generator.engines.EngineContext` and returns an object implementing the Engine protocol. The
registry lists names and where each came from without importing anything; the engine pool loads
an entry point only when its engine is used. This module sits in the config layer because
models.yaml names engines and must be validated before anything runs.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from importlib import metadata

from generator.errors import GoldensError

GROUP = "goldens.engines"
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # no '=' (--url NAME=URL) and no '@' (NAME@VERSION)


@dataclass(frozen=True)
class EngineInfo:
    name: str
    origin: str  # "built-in", or the distribution that registered it: "my-engines 0.2.0"
    summary: str  # one line: what it replays, or the entry point's target
    any_model: bool  # True: applies to any model named with --model (a server goldens does not
    #                  manage, a plugin); False: only to models that list it in models.yaml
    entry_point: metadata.EntryPoint | None = None
    problem: str | None = None  # why a registered engine cannot be used (a clashing name)


BUILT_IN = (
    EngineInfo("transformers", "built-in", "the reference itself: Transformers' apply_chat_template", False),
    EngineInfo("llama-server", "built-in", "llama-server's chat template and tokenizer (managed, or --url)", False),
    EngineInfo("client-completion", "built-in",
               "a client that renders the prompt itself and posts it to llama-server's /completion", False),
    EngineInfo("vllm", "built-in", "vLLM's chat rendering through /tokenize (managed, or --url)", False),
    EngineInfo("minijinja", "built-in", "minijinja (TGI's template engine) with the HF tokenizer", False),
    EngineInfo("mistral-common", "built-in", "mistral-common's own request encoding", False),
    EngineInfo("openai", "built-in",
               "any /v1/chat/completions server (--url): prompt token ids where it returns them, "
               "else usage.prompt_tokens as a count", True),
    EngineInfo("ollama", "built-in", "Ollama's /api/chat (--url): prompt_eval_count as a count", True),
)


@functools.lru_cache(maxsize=1)
def registered() -> tuple[EngineInfo, ...]:
    """Every engine: the built-ins, then each entry point of the group in name order. A plugin
    whose name is taken (by a built-in, or by another package) or is not a plain name is listed
    with its problem and never used, so which code runs under a name never depends on install
    order. Read once per process: scanning installed distributions is not free."""
    entries = sorted(metadata.entry_points(group=GROUP), key=lambda e: (e.name, _origin(e)))
    taken = {info.name for info in BUILT_IN}
    counts = Counter(entry.name for entry in entries)
    out = list(BUILT_IN)
    for entry in entries:
        problem = None
        if not NAME.match(entry.name):
            problem = "an engine name is lowercase letters, digits, '.', '_' and '-'"
        elif entry.name in taken:
            problem = "the name is a built-in engine's"
        elif counts[entry.name] > 1:
            problem = f"{counts[entry.name]} installed packages register this name"
        out.append(EngineInfo(entry.name, _origin(entry), entry.value, True, entry, problem))
    return tuple(out)


def available() -> dict[str, EngineInfo]:
    """The usable engines by name."""
    return {info.name: info for info in registered() if info.problem is None}


def lookup(name: str, where: str = "") -> EngineInfo:
    """The engine called `name`; an unknown or unusable name is a one-line error."""
    engines = registered()
    usable = {info.name: info for info in engines if info.problem is None}
    prefix = f"{where}: " if where else ""
    if name in usable:
        return usable[name]
    clashing = [info for info in engines if info.name == name]
    if clashing:
        origins = ", ".join(info.origin for info in clashing)
        raise GoldensError(f"{prefix}engine {name!r} from {origins} cannot be used: {clashing[0].problem}")
    raise GoldensError(f"{prefix}unknown engine {name[:60]!r}{'...' if len(name) > 60 else ''} (known: {', '.join(usable)})")


def _origin(entry: metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return "an unknown distribution"
    return f"{dist.metadata['Name']} {dist.version}"
