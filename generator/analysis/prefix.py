"""Prefix stability: every request of a conversation must start with the request before it.

A chat client sends the whole conversation again after every user turn or tool result, and an
engine's prefix cache reuses the computed state of as many leading tokens as the new request
shares with one it has seen. A request that rewrites an early token of the one before it makes
the engine recompute everything after that token; nothing fails, the only symptom is latency.

The check works on any engine's ids (the Engine protocol) and on any sequence of requests:
`requests_of` derives them from one recorded conversation (a request at the end of every run of
user/tool messages; a system message alone is never a request, an assistant turn is the reply),
and a client's own log of requests can be checked as sent. A break inside a declared tail at the
end of the earlier request (models.yaml `prefix_tails`, per model and variant, with its reason)
is by design and reported as declared; any other break is a finding.

`CACHE_BUSTERS` are client behaviours that move an early token, each next to the fixed client,
and `diagnose` names the client-side change between two request bodies when there is one.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from generator.config import shapes
from generator.config.models import ModelSpec, PrefixTail
from generator.engines import Engine, Refused, Request
from generator.errors import GoldensError
from generator.replay.divergence import first_divergence

CONTEXT = 5  # tokens shown on each side of a break
SHARED = 3  # shared tokens shown before it

Decode = Callable[[Sequence[int]], list[str]]


# ------------------------------------------------------------------------------ requests


def request_points(messages: Sequence[dict]) -> list[int]:
    """Message counts at which a client sends a request: the end of every run of user or tool
    messages (parallel tool results are sent together, once)."""
    points = []
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "tool"):
            continue
        following = messages[i + 1]["role"] if i + 1 < len(messages) else None
        if following not in ("user", "tool"):
            points.append(i + 1)
    return points


def requests_of(conversation: Request) -> list[Request]:
    """The requests a client sends over a recorded conversation: the same body (tools, kwargs)
    with the messages up to each request point, each asking for the next reply."""
    requests = []
    for count in request_points(conversation["messages"]):
        request = copy.deepcopy(conversation)
        request["messages"] = request["messages"][:count]
        request["add_generation_prompt"] = True
        request["continue_final_message"] = False
        requests.append(request)
    return requests


def is_multi_request(request: Request) -> bool:
    """Whether a golden's request stands for a conversation of two or more requests."""
    return (not request.get("continue_final_message")
            and request.get("add_generation_prompt", True)
            and len(request_points(request.get("messages") or [])) >= 2)


def variant_of(model: ModelSpec, kwargs: dict[str, Any]) -> str | None:
    """The variant whose template kwargs these are ("" = default), or None for no variant."""
    for variant, variant_kwargs in model.variants.items():
        if {**model.kwargs, **variant_kwargs} == kwargs:
            return variant
    return None


def tail_for(model: ModelSpec, kwargs: dict[str, Any]) -> PrefixTail | None:
    """The tail declared for the variant whose template kwargs these are (None: no tail)."""
    variant = variant_of(model, kwargs)
    return None if variant is None else model.prefix_tails.get(variant)


# ------------------------------------------------------------------------------ breaks


@dataclass
class Sent:
    """One request as the engine saw it: its message count and ids, or the engine's refusal."""

    messages: int
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def sha256(self) -> str:
        """sha256 of the ids written as comma-separated decimals, first 16 hex digits."""
        return hashlib.sha256(",".join(map(str, self.ids)).encode()).hexdigest()[:16]


@dataclass
class Break:
    """A later request that does not start with the earlier one."""

    earlier: int  # messages in the earlier request
    later: int  # messages in the later request
    position: int  # first token index where the later request differs
    earlier_len: int
    later_len: int
    declared: bool  # inside the declared tail at the end of the earlier request
    shared: list[str]  # pieces just before the break, in both
    earlier_pieces: list[str]  # from the break on, as the earlier request had them
    later_pieces: list[str]  # from the break on, as the later request has them
    hint: str | None = None  # what the client changed, and what to do instead

    def summary(self) -> str:
        return f"break at token {self.position} ({self.earlier} -> {self.later} messages)"

    def record(self) -> dict[str, Any]:
        """The golden form: compact, and one line per field in a diff."""
        return {
            "at": self.position,
            "messages": f"{self.earlier} -> {self.later}",
            "declared": self.declared,
            "shared": "".join(self.shared),
            "earlier": "".join(self.earlier_pieces),
            "later": "".join(self.later_pieces),
        }


def find_breaks(sent: Sequence[Sent], tail: int = 0) -> list[Break]:
    """Every consecutive pair of answered requests where the earlier is not a token prefix of
    the later; `declared` when the break lies in the last `tail` tokens of the earlier one."""
    answered = [s for s in sent if s.refused is None]
    breaks = []
    for a, b in zip(answered, answered[1:]):
        position = first_divergence(a.ids, b.ids[: len(a.ids)])
        if position is None:
            continue
        breaks.append(Break(
            earlier=a.messages, later=b.messages, position=position,
            earlier_len=len(a.ids), later_len=len(b.ids),
            declared=position >= len(a.ids) - tail,
            shared=a.pieces[max(0, position - SHARED):position],
            earlier_pieces=a.pieces[position:position + CONTEXT],
            later_pieces=b.pieces[position:position + CONTEXT],
        ))
    return breaks


@dataclass
class Result:
    """One conversation through one engine: every request sent and every break found."""

    label: str
    engine: str
    sent: list[Sent]
    breaks: list[Break]
    tail: PrefixTail | None = None

    @property
    def undeclared(self) -> list[Break]:
        return [b for b in self.breaks if not b.declared]

    def requests_record(self) -> list[dict[str, Any]]:
        rows = []
        for s in self.sent:
            if s.refused is not None:
                rows.append({"messages": s.messages, "refused": s.refused})
            else:
                rows.append({"messages": s.messages, "tokens": len(s.ids), "sha256": s.sha256})
        return rows


def _pieces(ids: Sequence[int], pieces: Sequence[str] | None, decode: Decode | None) -> list[str]:
    if pieces is not None and len(pieces) == len(ids):
        return list(pieces)
    if decode is not None:
        return decode(ids)
    return [f"#{i}" for i in ids]


def check(engine: Engine, requests: Sequence[Request], tail: PrefixTail | None = None,
          label: str = "", decode: Decode | None = None) -> Result:
    """Send each request through the engine and find the breaks between consecutive ones.
    A request the engine refuses is recorded as refused and left out of the comparison;
    any other engine failure propagates (an EngineError)."""
    sent = []
    for request in requests:
        count = len(request["messages"])
        try:
            ids = engine.ids(request)
        except Refused as refusal:
            sent.append(Sent(count, refused=str(refusal)))
            continue
        sent.append(Sent(count, list(ids), _pieces(ids, getattr(ids, "pieces", None), decode)))
    breaks = find_breaks(sent, tail.tokens if tail else 0)
    answered = [r for r, s in zip(requests, sent) if s.refused is None]
    pairs = {(len(a["messages"]), len(b["messages"])): (a, b) for a, b in zip(answered, answered[1:])}
    for item in breaks:
        if item.declared and tail is not None:
            item.hint = f"declared tail of {tail.tokens}: {tail.reason}"
        elif (item.earlier, item.later) in pairs:
            item.hint = diagnose(*pairs[(item.earlier, item.later)])
    return Result(label=label, engine=engine.name, sent=sent, breaks=breaks, tail=tail)


# ------------------------------------------------------------------------------ diagnosis


def diagnose(earlier: Request, later: Request) -> str:
    """What the client changed between two requests, and what it should do instead. When the
    later request repeats the earlier one's body and messages unchanged, the template itself
    renders an earlier turn differently once more turns follow."""
    before, after = earlier.get("tools") or [], later.get("tools") or []
    if before != after:
        if _names(before) != _names(after) and sorted(_names(before)) == sorted(_names(after)):
            return ("the tool list was reordered between requests; send the tools in one fixed order "
                    "on every request (sorted by name, or the order first sent)")
        return ("the tool list changed between requests; every change to it moves the system turn, "
                "so keep the list fixed for the whole conversation")
    if (earlier.get("chat_template_kwargs") or {}) != (later.get("chat_template_kwargs") or {}):
        return "chat_template_kwargs changed between requests; keep them fixed for a conversation"
    old_messages, new_messages = earlier["messages"], later["messages"]
    for index, (old, new) in enumerate(zip(old_messages, new_messages)):
        if old == new:
            continue
        calls_old, calls_new = old.get("tool_calls") or [], new.get("tool_calls") or []
        for a, b in zip(calls_old, calls_new):
            args_a = (a.get("function") or {}).get("arguments")
            args_b = (b.get("function") or {}).get("arguments")
            if type(args_a) is not type(args_b):
                kinds = f"{_kind(args_a)} in one request, {_kind(args_b)} in the next"
                return (f"messages[{index}] tool-call arguments were sent as {kinds}; send the call back "
                        "exactly as the server returned it (the same JSON string) on every request")
        if ("reasoning_content" in old) != ("reasoning_content" in new) or (
                old.get("reasoning_content") != new.get("reasoning_content")):
            return (f"messages[{index}] reasoning_content was kept in one request and dropped in the next; "
                    "send every assistant turn back as it came, reasoning included, and let the template "
                    "decide what to drop")
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return (f"messages[{index}] changed between requests ({', '.join(changed)}); send earlier turns "
                "back exactly as they were sent")
    if len(new_messages) < len(old_messages):
        return "the later request drops messages the earlier one sent; the whole prefix is recomputed"
    return ("the client repeated the earlier request unchanged: the template renders an earlier turn "
            "differently once later turns follow (by design? declare a prefix tail in models.yaml)")


def _names(tools: list[dict]) -> list[str]:
    return [str((t.get("function") or t).get("name")) for t in tools]


def _kind(value: Any) -> str:
    return {str: "a JSON string", dict: "an object"}.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------ cache-busters


def _compact(arguments: dict) -> str:
    """Arguments as an OpenAI-compatible server returns them in a reply: compact JSON text."""
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def _tool_call(call: dict, call_id: str, arguments: Any) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": arguments}}


def _tools_reordered(busted: bool, kwargs: dict) -> list[Request]:
    requests = requests_of({"messages": list(shapes.SESSION), "tools": shapes.TOOLS,
                            "chat_template_kwargs": kwargs})
    if busted:
        for request in requests[1:]:
            request["tools"] = list(reversed(shapes.TOOLS))
    return requests


def _arguments_retyped(busted: bool, kwargs: dict) -> list[Request]:
    def conversation(arguments: Any) -> list[dict]:
        return [
            shapes.SYSTEM,
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [_tool_call(shapes.WEATHER_CALL, shapes.CALL_1, arguments)]},
            {"role": "tool", "tool_call_id": shapes.CALL_1, "name": "get_weather", "content": "sunny, 21 C"},
            {"role": "assistant", "content": "Sunny, 21 C."},
            {"role": "user", "content": "And the time?"},
        ]

    as_string = _compact(shapes.WEATHER_CALL["arguments"])
    requests = requests_of({"messages": conversation(as_string), "tools": shapes.TOOLS,
                            "chat_template_kwargs": kwargs})
    if busted:  # the client parsed the arguments into an object after the first send
        requests[2]["messages"] = conversation(dict(shapes.WEATHER_CALL["arguments"]))
    return requests


def _reasoning_dropped(busted: bool, kwargs: dict) -> list[Request]:
    def conversation(keep: bool) -> list[dict]:
        first = {"role": "assistant", "content": "",
                 "tool_calls": [_tool_call(shapes.WEATHER_CALL, shapes.CALL_1, dict(shapes.WEATHER_CALL["arguments"]))]}
        if keep:
            first["reasoning_content"] = "Weather first, then the time."
        return [
            shapes.SYSTEM,
            {"role": "user", "content": "Weather and time in Paris?"},
            first,
            {"role": "tool", "tool_call_id": shapes.CALL_1, "name": "get_weather", "content": "sunny"},
            {"role": "assistant", "content": "",
             "tool_calls": [_tool_call(shapes.TIME_CALL, shapes.CALL_2, dict(shapes.TIME_CALL["arguments"]))]},
            {"role": "tool", "tool_call_id": shapes.CALL_2, "name": "get_time", "content": "noon"},
        ]

    requests = requests_of({"messages": conversation(True), "tools": shapes.TOOLS, "chat_template_kwargs": kwargs})
    if busted:  # the client stripped the reasoning it had sent back on the previous request
        requests[2]["messages"] = conversation(False)
    return requests


@dataclass(frozen=True)
class CacheBuster:
    name: str
    description: str
    fix: str
    build: Callable[[bool, dict], list[Request]]  # (busted, template kwargs) -> requests

    def requests(self, kwargs: dict, busted: bool = True) -> list[Request]:
        return self.build(busted, dict(kwargs))


CACHE_BUSTERS: dict[str, CacheBuster] = {b.name: b for b in (
    CacheBuster(
        "tools-reordered",
        "the same two tools sent in the other order after the first reply",
        "send the tool list in one fixed order on every request (sorted by name, or as first sent)",
        _tools_reordered,
    ),
    CacheBuster(
        "tool-arguments-retyped",
        "a tool call's arguments sent back as the server's JSON string, then as a parsed object",
        "send each tool call back exactly as the server returned it, arguments as the same string",
        _arguments_retyped,
    ),
    CacheBuster(
        "reasoning-dropped",
        "reasoning of a tool-calling turn sent back on one request and stripped on the next",
        "send assistant turns back as they came, reasoning included; let the template drop it",
        _reasoning_dropped,
    ),
)}


@dataclass
class BusterResult:
    buster: CacheBuster
    busted: Result  # the client as described
    fixed: Result  # the same conversation from a client that follows the fix


def cache_busters(engine: Engine, kwargs: dict, tail: PrefixTail | None = None,
                  decode: Decode | None = None) -> list[BusterResult]:
    return [
        BusterResult(
            buster,
            check(engine, buster.requests(kwargs, busted=True), tail, f"cache-buster {buster.name}", decode),
            check(engine, buster.requests(kwargs, busted=False), tail, f"{buster.name} (fixed)", decode),
        )
        for buster in CACHE_BUSTERS.values()
    ]


def buster_record(result: BusterResult) -> dict[str, str]:
    """The golden form of one cache-buster, one line per client: request lengths and breaks
    (position, message counts, declared or not), as sent and as the fixed client sends it."""
    def side(item: Result) -> str:
        lengths = ", ".join(str(len(s.ids)) if s.refused is None else "refused" for s in item.sent)
        breaks = ", ".join(
            f"{b.position} ({b.earlier} -> {b.later}{', declared' if b.declared else ''})" for b in item.breaks
        )
        return f"tokens {lengths}; " + (f"breaks at {breaks}" if breaks else "no breaks")

    return {"as_sent": side(result.busted), "fixed": side(result.fixed)}


# ------------------------------------------------------------------------------ conversations


def multi_turn_shapes(model: ModelSpec) -> list[str]:
    """The model's shapes that stand for two or more requests."""
    return [s for s in model.shapes if is_multi_request(model.request(s, {}))]


def load_conversation(text: str, where: str) -> list[Request]:
    """A conversation file: one chat body holding the whole recorded conversation (requests are
    derived at every request point), or a JSON list of chat bodies, the requests as a client
    sent them, in order (so a client's own changes between requests are checked too)."""
    from generator.config.request import load_json, validate_request

    data = load_json(text, where)
    if isinstance(data, list):
        if len(data) < 2:
            raise GoldensError(f"{where}: a list of requests needs at least two")
        return [validate_request(body, f"{where}[{i}]") for i, body in enumerate(data)]
    body = validate_request(data, where)
    requests = requests_of(body)
    if len(requests) < 2:
        raise GoldensError(
            f"{where}: the conversation has {len(requests)} request point(s); a prefix check needs "
            "two or more (a request after every user turn or tool result)"
        )
    return requests


# ------------------------------------------------------------------------------ report


def format_result(result: Result, verbose_context: bool = True) -> str:
    """Each request's length and every break, declared or not, with the tokens around it."""
    counts = ", ".join(str(s.messages) for s in result.sent)
    lengths = ", ".join(str(len(s.ids)) if s.refused is None else "refused" for s in result.sent)
    head = (f"{result.label} on {result.engine}: {len(result.sent)} requests of {counts} messages: "
            f"{lengths} tokens")
    lines = [head]
    for s in result.sent:
        if s.refused is not None:
            lines.append(f"  request of {s.messages} messages refused: {s.refused}")
    if not result.breaks:
        lines.append("  no breaks")
    for item in result.breaks:
        status = "declared" if item.declared else "UNDECLARED"
        lines.append(f"  {status} {item.summary()}, {item.earlier_len} vs {item.later_len} tokens")
        if verbose_context:
            shared = " ".join(repr(p) for p in item.shared)
            lines.append(f"    shared  {('…' + shared) if shared else '(start)'}")
            lines.append(f"    earlier »{' '.join(repr(p) for p in item.earlier_pieces) or '(ends here)'}")
            lines.append(f"    later   »{' '.join(repr(p) for p in item.later_pieces) or '(ends here)'}")
        if item.hint:
            lines.append(f"    {item.hint}")
    return "\n".join(lines)


def format_buster(result: BusterResult) -> str:
    """The client's breaks with the tokens around them, the fix, and the fixed client's result."""
    lines = format_result(result.busted).splitlines()
    lines.insert(1, f"  ({result.buster.description})")
    fixed = result.fixed.undeclared
    lines.append(f"  fix: {result.buster.fix}")
    lines.append("  fixed client: " + ("no undeclared breaks" if not fixed
                                       else "; ".join(b.summary() for b in fixed)))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ command


def parse_kwargs(text: str | None) -> dict[str, Any] | None:
    """`--kwargs JSON`: a JSON object of chat-template kwargs, or None when not given."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise GoldensError(f"--kwargs: not valid JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(value, dict):
        raise GoldensError("--kwargs: expected a JSON object such as '{\"enable_thinking\": false}'")
    return value


def _with_kwargs(requests: list[Request], kwargs: dict[str, Any]) -> list[Request]:
    """Requests with the run's kwargs under each request's own (what the client sent wins)."""
    out = []
    for request in requests:
        request = copy.deepcopy(request)
        request["chat_template_kwargs"] = {**kwargs, **(request.get("chat_template_kwargs") or {})}
        out.append(request)
    return out


def run_command(config, model_name: str, engine_name: str | Sequence[str] = "transformers",
                kwargs: dict | None = None,
                conversation: list[Request] | None = None, conversation_name: str = "conversation",
                url: str | None = None, busters: bool = False,
                echo: Callable[[str], None] = print, note: Callable[[str], None] | None = None) -> int:
    """`goldens prefix`: the multi-turn shapes (every variant, or the one --kwargs names) or one
    conversation, through one engine or several (`llama-server@11000 llama-server@11434`, then a
    table puts their breaks side by side); prints every request's length and every break with
    the tokens around it. Returns 1 when a break lies outside a declared tail, else 0."""
    from generator import reference
    from generator.config import engine_spec
    from generator.config.models import ENGINE_NAMES
    from generator.engines.pool import EnginePool, check_available
    from generator.sources.source import resolve

    specs = [engine_spec.parse(name, ENGINE_NAMES)
             for name in ([engine_name] if isinstance(engine_name, str) else engine_name)]
    for spec in specs if not url else ():
        check_available(spec, config.engine_versions)
    (model,) = config.select([model_name])
    source = resolve(model, config)
    tokenizer = reference.load_tokenizer(source.tokenizer_dir)

    def decode(ids: Sequence[int]) -> list[str]:
        return reference.pieces(tokenizer, list(ids))

    if kwargs is not None:
        merged = {**model.kwargs, **kwargs}
        variant = variant_of(model, merged)
        runs = [(json.dumps(kwargs, sort_keys=True) if variant is None else variant or "default", merged)]
    elif conversation is not None:
        runs = [("", dict(model.kwargs))]
    else:
        runs = [(variant, {**model.kwargs, **vkw}) for variant, vkw in model.variants.items()]

    results: list[Result] = []
    urls = {specs[0].name: url} if url else None
    with EnginePool(config.date, urls=urls, on_start=note, versions=config.engine_versions) as pool:
        for spec in specs:
            engine = pool.engine(spec, model, source)
            if len(specs) > 1:
                echo(f"== {spec.label}")
            for variant, run_kwargs in runs:
                suffix = f" [{variant or 'default'}]" if variant or len(runs) > 1 else ""
                if conversation is not None:
                    requests = _with_kwargs(conversation, run_kwargs)
                    tail = tail_for(model, requests[0]["chat_template_kwargs"])
                    jobs = [(f"{model.name} {conversation_name}{suffix}", requests)]
                else:
                    tail = tail_for(model, run_kwargs)
                    jobs = [(f"{model.name}/{shape}{suffix}", requests_of(model.request(shape, run_kwargs)))
                            for shape in multi_turn_shapes(model)]
                for label, requests in jobs:
                    result = check(engine, requests, tail, label, decode)
                    result.engine = spec.label
                    results.append(result)
                    echo(format_result(result))
                if busters:
                    for item in cache_busters(engine, run_kwargs, tail, decode):
                        echo(format_buster(item))
    if len(specs) > 1:
        echo(side_by_side(results, [spec.label for spec in specs]))
    breaks = [b for r in results for b in r.breaks]
    undeclared = [b for b in breaks if not b.declared]
    echo(f"{len(results)} conversation(s), {sum(len(r.sent) for r in results)} requests: "
         f"{len(breaks)} break(s), {len(undeclared)} undeclared")
    return 1 if undeclared else 0


def side_by_side(results: Sequence[Result], engines: Sequence[str]) -> str:
    """One row per conversation, one column per engine: its breaks, where, and whether declared."""

    def cell(result: Result | None) -> str:
        if result is None:
            return "-"
        if not result.breaks:
            return "no break"
        return ", ".join(f"token {b.position} ({b.earlier} -> {b.later} messages)"
                         + ("" if b.declared else " undeclared")
                         for b in result.breaks)

    labels = list(dict.fromkeys(r.label for r in results))
    grid = {(r.label, r.engine): r for r in results}
    rows = [["conversation", *engines]] + [[label, *(cell(grid.get((label, e))) for e in engines)] for label in labels]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
