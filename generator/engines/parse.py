"""The output side of an engine: output ids -> the message a client receives.

A served answer goes back through the engine's incremental detokenizer, its reasoning parser and
its tool-call parser. An engine that has this path (its registry entry says `parses`) offers

    parse(request, output, chunks) -> Parsed

`request` is the chat body the output answers (the same dict `ids` gets: messages, tools,
chat_template_kwargs, tool_choice...), `output` the ids the model emitted after the generation
prompt, its end-of-turn token included, and `chunks` how they arrive: None for one non-streamed
answer, else the number of ids in each streamed step (their sum is len(output)). The answer is
data in one normalized shape, whatever the engine's wire format, so the judge
(replay/judging/parse/judge.py) reads no engine's JSON:

    message  {"content": str|None, "reasoning_content": str|None,
              "tool_calls": [{"name": str, "arguments": str}], "finish_reason": str|None}
    deltas   one list per chunk of what the engine emitted after it, each delta
             {"content"?: str, "reasoning_content"?: str, "finish_reason"?: str,
              "tool_calls"?: [{"index": int, "name"?: str, "arguments"?: str}]}

A refusal (HTTP 4xx, a parser raising on the request) is `Refused`, as for ids; an engine that
cannot answer raises EngineError. Call ids are dropped here: they are random in every engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from generator.errors import EngineError

Message = dict[str, Any]
Delta = dict[str, Any]
MESSAGE_KEYS = ("content", "reasoning_content", "tool_calls", "finish_reason")


@dataclass
class Parsed:
    """One plan's answer: the whole message (chunks None) or the deltas of each chunk."""

    message: Message | None = None
    deltas: list[list[Delta]] | None = None
    notes: list[str] = field(default_factory=list)  # what the adapter did that the engine's server would too

    def assembled(self) -> Message:
        """The message a client builds from the stream (OpenAI's accumulation rule: text appended,
        a call's name from its first delta, its arguments concatenated by index)."""
        if self.message is not None:
            return self.message
        return assemble(self.deltas or [])


@runtime_checkable
class Parser(Protocol):
    """What does this engine make of the ids a model emitted?"""

    name: str

    def parse(self, request: dict[str, Any], output: Sequence[int],
              chunks: Sequence[int] | None) -> Parsed: ...


def empty_message() -> Message:
    return {"content": None, "reasoning_content": None, "tool_calls": [], "finish_reason": None}


def _text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise EngineError(f"{where} is {type(value).__name__}, not text")


def message_of(message: Mapping[str, Any] | None, finish_reason: Any, where: str) -> Message:
    """An OpenAI ChatCompletion message (+ its choice's finish_reason) in the normalized shape:
    `reasoning` (vLLM's newer name) or `reasoning_content`; a call's `function` name and
    `arguments` (an object, as Transformers' parse_response gives, becomes its JSON text)."""
    import json

    if message is None:
        message = {}
    if not isinstance(message, Mapping):
        raise EngineError(f"{where}: the message is {type(message).__name__}, not an object")
    reasoning = message.get("reasoning_content")
    if reasoning is None:
        reasoning = message.get("reasoning")
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function", call) if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise EngineError(f"{where}: tool_calls[{i}] has no function")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append({"name": _text(function.get("name"), f"{where}: tool_calls[{i}].name") or "",
                      "arguments": arguments if arguments is not None else ""})
    return {"content": _text(message.get("content"), f"{where}: content"),
            "reasoning_content": _text(reasoning, f"{where}: reasoning_content"),
            "tool_calls": calls, "finish_reason": _text(finish_reason, f"{where}: finish_reason")}


def delta_of(delta: Mapping[str, Any] | None, finish_reason: Any, where: str) -> Delta:
    """One OpenAI ChatCompletionChunk choice (its `delta` and `finish_reason`) normalized; keys
    with nothing in them are left out, so an empty delta is {}."""
    out: Delta = {}
    delta = delta or {}
    if not isinstance(delta, Mapping):
        raise EngineError(f"{where}: the delta is {type(delta).__name__}, not an object")
    content = _text(delta.get("content"), f"{where}: content")
    reasoning = delta.get("reasoning_content")
    if reasoning is None:
        reasoning = delta.get("reasoning")
    reasoning = _text(reasoning, f"{where}: reasoning_content")
    if content:
        out["content"] = content
    if reasoning:
        out["reasoning_content"] = reasoning
    calls = []
    for i, call in enumerate(delta.get("tool_calls") or []):
        if not isinstance(call, Mapping):
            raise EngineError(f"{where}: tool_calls[{i}] is not an object")
        function = call.get("function") or {}
        item: dict[str, Any] = {"index": call.get("index", i)}
        if type(item["index"]) is not int:
            raise EngineError(f"{where}: tool_calls[{i}].index is {item['index']!r}")
        if function.get("name"):
            item["name"] = _text(function["name"], f"{where}: tool_calls[{i}].name")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            import json

            arguments = json.dumps(arguments, ensure_ascii=False)
        if arguments:
            item["arguments"] = arguments
        calls.append(item)
    if calls:
        out["tool_calls"] = calls
    if finish_reason is not None:
        out["finish_reason"] = _text(finish_reason, f"{where}: finish_reason")
    return out


def assemble(deltas: Sequence[Sequence[Delta]]) -> Message:
    """The message a streaming client assembles: content and reasoning appended in order, each
    call by its index (name from the first delta that names it, arguments concatenated), the
    last finish_reason given."""
    message = empty_message()
    calls: dict[int, dict[str, str]] = {}
    for chunk in deltas:
        for delta in chunk:
            for key in ("content", "reasoning_content"):
                if delta.get(key):
                    message[key] = (message[key] or "") + delta[key]
            for call in delta.get("tool_calls") or ():
                slot = calls.setdefault(call["index"], {"name": "", "arguments": ""})
                if call.get("name") and not slot["name"]:
                    slot["name"] = call["name"]
                slot["arguments"] += call.get("arguments") or ""
            if delta.get("finish_reason") is not None:
                message["finish_reason"] = delta["finish_reason"]
    message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def split(output: Sequence[int], chunks: Sequence[int]) -> list[list[int]]:
    """The output cut into the plan's chunks (their sizes must add up to its length)."""
    if sum(chunks) != len(output) or any(n <= 0 for n in chunks):
        raise EngineError(f"a chunk plan of {sum(chunks)} ids for an output of {len(output)}")
    out, at = [], 0
    for n in chunks:
        out.append(list(output[at:at + n]))
        at += n
    return out


def end_ids(source, end: Sequence[str]) -> frozenset[int]:
    """The ids of the model's end-of-turn tokens (models.yaml `parse.end`) in its tokenizer."""
    if not end:
        return frozenset()
    from generator import reference

    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    return frozenset(tokenizer.convert_tokens_to_ids(token) for token in end)


def generation_finish(output: Sequence[int], ends: frozenset[int]) -> str:
    """What a generate step says of these output ids: "stop" when they end in an end-of-turn
    token (or none is known), "length" when generation stopped before one (its token limit).
    For an adapter that hands output ids to a server's parse path as generate would."""
    return "stop" if not ends or (output and output[-1] in ends) else "length"
