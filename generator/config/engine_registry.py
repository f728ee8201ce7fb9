"""Which engines exist and what each can do: the one registry, built-in and plugin engines alike.

An entry names its engine's factory (a callable taking one `generator.engines.EngineContext`
and returning an Engine) and declares its capabilities: whether and how it is versioned, whose
version, pin and --url it follows, whether it takes media, the managed server it needs, the
stand-in endpoint its ids come from, and whether it answers with ids or only a count. Everything
else (the pool, `check`, `bisect`, `prefix`, models.yaml validation, `goldens engines`) reads
this module; an unknown name is an error, never a fallback.

A built-in engine is one folder under generator/engines/ (its engine, server or worker,
coverage layer and which-models rule) plus one entry in BUILT_IN: the only list of engines.
References to code are "module:attribute" strings, loaded only when used, so this config-layer
module imports no engine. A package adds an engine with an entry point in the `goldens.engines` group:
its value names either a factory (no capabilities beyond ids) or an `Entry` declaring the same
capabilities as a built-in; it is loaded only when its engine is used.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import re
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from generator.errors import GoldensError

GROUP = "goldens.engines"
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")  # no '=' (--url NAME=URL) and no '@' (NAME@VERSION)


@dataclass(frozen=True)
class Versions:
    """How an engine's versions are spelt and made ready.

    `key` is the models.yaml `engines:` key and the spelling: "build" (a llama.cpp build number)
    or "version" (a PEP 440 release). `line` names an object (generator.engines.VersionLine)
    that knows the default, whether a version can be used here, and how it is made ready;
    `bisect` says whether its published releases can be searched."""

    key: str
    line: str
    bisect: bool = False


@dataclass(frozen=True)
class Server:
    """A server goldens starts and stops for an engine, one per (kind, version, model), or per
    (kind, version) when not `per_model`. `make` names a callable
    (model: ModelSpec, source, version: str, on_start) -> the server, not yet started: the pool
    owns its `stop()` before calling its `start()`."""

    kind: str
    make: str
    per_model: bool = True
    start_seconds: float = 0.0  # a start's rough cost, for sharding a matrix no durations file measured
    # too big to keep beside the next model's (vLLM: 3.5 GB): a run sharing a pool (the pytest
    # plugin) stops it after its model's cases, and orders those cases together
    one_model_at_a_time: bool = False
    # what every server of this kind and version needs whatever the model (llama.cpp's build,
    # vLLM's venv) is its engine's version line's `ready` (and `cached`): `goldens check` runs it
    # in a process of its own at the start, beside the first cases, which need none
    prepare: bool = False


@dataclass(frozen=True)
class Entry:
    """What an engine declares (a plugin's entry point may name one). `factory` is a
    "module:callable" string or the callable itself."""

    factory: Any
    summary: str = ""
    any_model: bool = False  # applies to any model named with --model (a server goldens does not
    #                          manage, a plugin), not only to models that list it in models.yaml
    versions: Versions | None = None
    follows: str | None = None  # a client of another engine's server: its version, pin and --url
    media: bool = False  # takes media data, so it is asked the expanded-view (image) cases
    server: Server | None = None  # the managed server it needs when no --url is given
    stand_in: str | None = None  # the endpoint its ids read in place of serving; `serve` confirms it
    evidence: str = "ids"  # "ids", or "ids or count" / "count" (PromptCount: judged as a count)
    starter: bool = False  # listed for a new model by `goldens init`: runs anywhere, no server
    # which models it can render: a "module:callable" taking a ModelSpec and returning None, or
    # why that model cannot be replayed through it (`goldens engines --matrix` prints it)
    applies: Any = None
    # the output side (generator/engines/parse.py): how the engine's object turns output ids back
    # into a message (`parse`), in words; "" when it has no parse path
    parses: str = ""
    renders: bool = True  # False: a parse-only engine (SGLang's parsers), asked no render case
    # which models it can parse ("module:callable" ModelSpec -> None or why not), as `applies`
    parse_applies: Any = None
    parses_every_version: bool = True  # False: only the installed release parses (bisect and history ask no parse case)
    parses_by_url: bool = True  # False: its parse path runs here (a harness), never through a --url server
    # what a parse report (`goldens ledger --report`, replay/reporting/defects.py) says the output went through:
    # the exact API called, with {tool}, {reasoning}, {response} the model's parser names (models.yaml)
    parse_route: str = ""
    # its request layer as `goldens coverage --engine` measures it: a "module:attribute" naming a
    # generator.measure.engine.Layer (the engine's coverage.py); None when it is not measured
    coverage: Any = None
    # its installed release renders in this process: no managed server, worker process, venv of its
    # own or Node (another release may need one), so the fast tier can test it (tests/conftest.py)
    in_process: bool = False
    # models.yaml's `tool_parser:` names this engine's tool-call parser (a model's
    # `parsers: {<engine>: {tool: ...}}` still says otherwise); at most one built-in declares it
    takes_tool_parser: bool = False


@dataclass(frozen=True)
class EngineInfo(Entry):
    name: str = ""
    origin: str = "built-in"  # or the distribution that registered it: "my-engines 0.2.0"
    entry_point: metadata.EntryPoint | None = None
    problem: str | None = None  # why a registered engine cannot be used (a clashing name)

    @property
    def pinned_as(self) -> str:
        """The engine whose version pin and --url this one uses (its own unless it follows one)."""
        return self.follows or self.name


def _built_in(name: str, factory: str, summary: str, **capabilities: Any) -> EngineInfo:
    return EngineInfo(name=name, factory=factory, summary=summary, **capabilities)


LLAMA_CPP = Versions("build", "generator.engines.llama_server.engine:BUILDS", bisect=True)
# Start costs measured by bench/shards.py in proportion (vLLM 69.6 s, llama-server 2.3 s on 2
# cores), rounded up for loaded CI runners; only their proportions matter to the partition.
LLAMA_SERVER = Server("llama-server", "generator.engines.llama_server.engine:make_server", start_seconds=8.0,
                      prepare=True)

REFERENCE = "transformers"  # the engine the goldens are rendered with: a model's default engine

BUILT_IN = (
    _built_in(REFERENCE, "generator.engines.transformers.engine:open_engine",
              "the reference itself: Transformers' apply_chat_template", media=True, starter=True,
              in_process=True,
              versions=Versions("version", "generator.engines.transformers.engine:RELEASES", bisect=True),
              server=Server("transformers", "generator.engines.transformers.engine:make_worker", per_model=False,
                            start_seconds=5.0),
              parses="transformers serve's response templates (the model_type fallbacks of its serving "
                     "code), whole and through its DirectStreamer",
              parse_applies="generator.engines.transformers.parse:applies", parses_every_version=False,
              parse_route="`transformers serve`'s chat output path (transformers/cli/serving/utils.py) with the "
                          "`{response}` response template: whole, `parse_assistant_message`; streamed, a "
                          "`ResponseParser` fed through `DirectStreamer`, one chunk of ids per `put`"),
    _built_in("llama-server", "generator.engines.llama_server.engine:open_engine",
              "llama-server's chat template and tokenizer", media=True,
              coverage="generator.engines.llama_server.coverage:LAYER",
              versions=LLAMA_CPP, server=LLAMA_SERVER, stand_in="/apply-template + /tokenize",
              parses="goldens-parse, built beside each llama-server build and linked against its server "
                     "library: the chat request parsed as the server does, each id detokenized and "
                     "re-parsed (common_chat_parse) as the slot loop does, deltas by compute_diffs",
              parses_by_url=False,
              parse_route="llama-server's `/v1/chat/completions` output path, its own code built into goldens' "
                          "parse harness (generator/engines/llama_server/llama_parse): oaicompat_chat_params_parse on the "
                          "request (template, chat parser, reasoning format as the server defaults them), each id "
                          "detokenized as update_slots does, common_chat_parse on the text so far (streamed: "
                          "after each id), finish_reason as to_json_oaicompat_chat gives it"),
    _built_in("client-completion", "generator.engines.llama_server.engine:open_client",
              "a client that renders the prompt itself and posts it to llama-server's /completion",
              versions=LLAMA_CPP, follows="llama-server", server=LLAMA_SERVER),
    _built_in("vllm", "generator.engines.vllm.engine:open_engine",
              "vLLM's chat rendering: its weightless render server's /v1/chat/completions/render",
              media=True, coverage="generator.engines.vllm.coverage:LAYER", takes_tool_parser=True,
              versions=Versions("version", "generator.engines.vllm.engine:RELEASES", bisect=True),
              server=Server("vllm", "generator.engines.vllm.engine:make_server", start_seconds=60.0,
                            one_model_at_a_time=True, prepare=True),
              stand_in="/tokenize",
              parses="its render server's /v1/chat/completions/derender (vLLM 0.24.0+; streamed, one "
                     "chunk per call with the stream_state it returns, 0.31.0+ with parsers), through "
                     "the server's --reasoning-parser and --tool-call-parser",
              parse_route="vLLM's `POST /v1/chat/completions/derender` on a render server (`vllm launch render`) "
                          "run with tool-call parser `{tool}` (`--enable-auto-tool-choice --tool-call-parser`) and "
                          "reasoning parser `{reasoning}` (`--reasoning-parser`; none: the flag is not given): whole, one DerenderChatRequest whose `generate_response` holds the output "
                          "ids and finish_reason; streamed, one DerenderChatStreamRequest per chunk (`stream: true`, "
                          "`generate_chunk`, the `stream_state` the previous call returned); its `chat_request` is "
                          "the request below"),
    _built_in("minijinja", "generator.engines.minijinja.engine:open_engine",
              "minijinja (TGI's template engine) with the HF tokenizer", starter=True, in_process=True,
              coverage="generator.engines.minijinja.coverage:LAYER"),
    _built_in("mistral-common", "generator.engines.mistral_common.engine:open_engine",
              "mistral-common's own request encoding", in_process=True,
              applies="generator.engines.mistral_common.applies:tekken_only",
              coverage="generator.engines.mistral_common.coverage:LAYER"),
    _built_in("transformers-js", "generator.engines.transformers_js.engine:open_engine",
              "transformers.js's apply_chat_template: npm @huggingface/jinja 0.5.13 and "
              "@huggingface/tokenizers 0.2.0 in Node"),
    _built_in("harmony", "generator.engines.harmony.engine:open_engine",
              "openai-harmony 0.0.8 (gpt-oss's own renderer), as vLLM's gpt-oss chat path uses it",
              applies="generator.engines.harmony.applies:gpt_oss_only",
              parses="openai-harmony's parse_messages_from_completion_tokens, and its StreamableParser id by id",
              parse_applies="generator.engines.harmony.applies:gpt_oss_only"),
    _built_in("sglang", "generator.engines.sglang.engine:open_engine",
              "SGLang's detokenizer, reasoning and tool-call parsers (PyPI sglang, no server)",
              versions=Versions("version", "generator.engines.sglang.engine:RELEASES", bisect=True),
              server=Server("sglang", "generator.engines.sglang.engine:make_worker", start_seconds=5.0, prepare=True),
              renders=False,
              parses="the release's own parsers in a light venv (sglang==V --no-deps), behind the "
                     "DetokenizerManager's incremental detokenization and serving_chat's order "
                     "(reasoning parser, then tool-call parser; finish_reason tool_calls), copied "
                     "from SGLang's source: whole (parse_non_stream) and chunk by chunk "
                     "(parse_stream_chunk)",
              parse_applies="generator.engines.sglang.applies:sglang_parsers",
              parse_route="SGLang's own parsers, run as serving_chat runs them (generator/engines/sglang/worker.py): "
                          "the DetokenizerManager's incremental decode, reasoning parser `{reasoning}` "
                          "(`ReasoningParser`; none: not run) and tool-call parser `{tool}` "
                          "(`FunctionCallParser(tools, ...)`): whole, `parse_non_stream` (the detector's "
                          "`detect_and_parse`); streamed, `parse_stream_chunk` (its `parse_streaming_increment`) "
                          "once per chunk"),
    _built_in("openai", "generator.engines.openai.engine:open_engine",
              "any /v1/chat/completions server (--url): prompt token ids where it returns them, "
              "else usage.prompt_tokens", any_model=True, evidence="ids or count"),
    _built_in("ollama", "generator.engines.ollama.engine:open_engine",
              "Ollama's /api/chat (--url): prompt_eval_count", any_model=True, evidence="count",
              applies="generator.engines.ollama.applies:ollama_url"),
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
        out.append(EngineInfo(factory=entry.value, summary=entry.value, any_model=True, name=entry.name,
                              origin=_origin(entry), entry_point=entry, problem=problem))
    return tuple(out)


def starters() -> tuple[str, ...]:
    """The engines `goldens init` lists for a new model (Entry.starter)."""
    return tuple(info.name for info in BUILT_IN if info.starter)


def in_process() -> frozenset[str]:
    """The built-in engines whose installed release renders in this process (Entry.in_process)."""
    return frozenset(info.name for info in BUILT_IN if info.in_process)


def takes_tool_parser(engine: str) -> bool:
    """Whether models.yaml's `tool_parser:` names `engine`'s tool-call parser (Entry.takes_tool_parser;
    built-ins only: reading models.yaml loads no plugin)."""
    return any(info.name == engine and info.takes_tool_parser for info in BUILT_IN)


def one_model_at_a_time() -> tuple[str, ...]:
    """The managed server kinds a shared pool stops after each model (Server.one_model_at_a_time)."""
    return tuple(sorted({info.server.kind for info in BUILT_IN
                         if info.server is not None and info.server.one_model_at_a_time}))


def available() -> dict[str, EngineInfo]:
    """The usable engines by name."""
    return {info.name: info for info in registered() if info.problem is None}


def lookup(name: str, where: str = "") -> EngineInfo:
    """The engine called `name`, as registered (a plugin's declared capabilities are read by
    `declared`, which loads it); an unknown or unusable name is a one-line error."""
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


@functools.lru_cache(maxsize=None)
def declared(name: str) -> EngineInfo:
    """The engine with every capability it declares: a built-in's entry, or a plugin's once its
    entry point is loaded (an `Entry` it names; a bare factory declares none). A plugin that
    cannot be imported is a one-line error naming it and its package."""
    info = lookup(name)
    if info.entry_point is None:
        return info
    try:
        target = info.entry_point.load()
    except Exception as error:  # noqa: BLE001 - a plugin's import may raise anything: one line
        raise GoldensError(f"{describe(info)}: cannot load: {type(error).__name__}: {error}") from None
    if isinstance(target, Entry):
        fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(Entry)}
        return dataclasses.replace(info, **{**fields, "summary": target.summary or info.summary,
                                            "any_model": True})
    return dataclasses.replace(info, factory=target)


def capabilities(name: str) -> EngineInfo:
    """What `declared` says, or the registration alone when a plugin cannot be loaded (opening
    it then reports why, against its own cases)."""
    try:
        return declared(name)
    except GoldensError:
        return lookup(name)


def factory(info: EngineInfo):
    """The callable that builds the engine from an EngineContext."""
    return load(info.factory)


def load(reference: Any) -> Any:
    """The object a "module:attribute" string names; an entry field given as the object itself
    (a plugin's `Entry` may hold callables) is that object."""
    if not isinstance(reference, str):
        return reference
    module, _, attribute = reference.partition(":")
    target: Any = importlib.import_module(module)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


def version_line(info: EngineInfo):
    """The engine's VersionLine (None for an engine without versions of its own)."""
    return None if info.versions is None else load(info.versions.line)


def measured() -> list[str]:
    """The built-in engines whose request layer `goldens coverage --engine` measures (Entry.coverage)."""
    return [info.name for info in BUILT_IN if info.coverage is not None]


def versioned() -> list[str]:
    """The built-in engines with versions (for error lines)."""
    return [info.name for info in BUILT_IN if info.versions is not None]


def pins() -> dict[str, str]:
    """Engine -> its models.yaml `engines:` key ("build" or "version"): the built-ins with a
    version of their own (one following another's is pinned by that one's), and the plugins,
    whose key `pin_key` reads from what they declare."""
    out = {info.name: info.versions.key for info in BUILT_IN if info.versions is not None and not info.follows}
    return {**out, **{name: "" for name, info in available().items() if info.entry_point is not None}}


def pin_key(name: str, where: str) -> str:
    """The `engines:` key that pins `name` (a plugin is loaded to read it)."""
    info = declared(name)
    if info.versions is None or info.follows:
        raise GoldensError(f"{where}: {name} has no version of its own to pin")
    return info.versions.key


def bisectable() -> list[str]:
    """The built-in engines whose published releases `goldens bisect` can search."""
    return [info.name for info in BUILT_IN if info.versions is not None and info.versions.bisect]


def declares(info: EngineInfo) -> str:
    """What an entry declares beyond ids, for `goldens engines`: "" when nothing."""
    parts = []
    if info.versions is not None:
        parts.append(f"versions: {info.follows}'s" if info.follows else f"versions: {info.versions.key}")
    if info.server is not None:
        parts.append(f"server: {info.server.kind}")
    if info.media:
        parts.append("media")
    if info.stand_in:
        parts.append(f"stand-in: {info.stand_in}")
    if info.evidence != "ids":
        parts.append(f"evidence: {info.evidence}")
    return f" [{', '.join(parts)}]" if parts else ""


def parses_as(spec: Any, urls: Any = ()) -> bool:
    """Whether the engine as chosen (`spec`: a name and perhaps a version; `urls`: the engines
    given --url) has a parse path: another release of one that parses only the installed one, or
    a --url server of one whose parse path is a local harness, is asked no parse case."""
    info = capabilities(spec.name)
    if not info.parses:
        return False
    if spec.version is not None and not info.parses_every_version:
        return False
    return not (spec.name in urls and not info.parses_by_url)


def parse_reason(name: str, model: Any) -> str | None:
    """Why `name` cannot parse `model`'s outputs (None: it can): no parse path, or its
    `parse_applies` rule says why not."""
    info = capabilities(name)
    if not info.parses:
        return f"{name} has no parse path"
    return None if info.parse_applies is None else load(info.parse_applies)(model)


def describe(info: EngineInfo) -> str:
    """How an error line names a plugin engine: `engine 'x' (module:Class from pkg 1.0)`."""
    return f"engine {info.name!r} ({info.summary} from {info.origin})"


def _origin(entry: metadata.EntryPoint) -> str:
    dist = getattr(entry, "dist", None)
    if dist is None:
        return "an unknown distribution"
    return f"{dist.metadata['Name']} {dist.version}"
