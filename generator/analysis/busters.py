"""Cache-busters: client behaviours that move an early token of a conversation, each beside the
fixed client.

Each builds the same conversation twice, as the careless client sends it (tools reordered after
the first reply, tool-call arguments sent back as an object instead of the server's string,
reasoning stripped on the next request) and as the fixed client does. Goldens of the multi-turn
shape record both through the reference (`record`); `goldens prefix --cache-busters` shows them
on any engine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from generator.analysis.prefix import Result, check, requests_of
from generator.config import shapes
from generator.config.models import PrefixTail
from generator.engines import Decode, Engine, Request


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


def record(result: BusterResult) -> dict[str, str]:
    """The golden form of one cache-buster, one line per client: request lengths and breaks
    (position, message counts, declared or not), as sent and as the fixed client sends it."""
    def side(item: Result) -> str:
        lengths = ", ".join(str(len(s.ids)) if s.refused is None else "refused" for s in item.sent)
        breaks = ", ".join(
            f"{b.position} ({b.earlier} -> {b.later}{', declared' if b.declared else ''})" for b in item.breaks
        )
        return f"tokens {lengths}; " + (f"breaks at {breaks}" if breaks else "no breaks")

    return {"as_sent": side(result.busted), "fixed": side(result.fixed)}
