"""Parse cases: a conversation plus the assistant message a model would produce (the output axis).

A parse case is a chat body whose last message is the assistant's. Its output ids come from the
reference by round trip (generator/parse_reference.py), or, where the body carries `output` (the
raw text the model emitted, special tokens written as text), from the tokenizer; the assistant
message is the parse every engine should give back. Built-in parse shapes are plain data like the
render shapes, each reaching a different branch of a reasoning or tool-call parser; the ones a
model's template writes are kept for it (recorded in the capabilities lock, so the matrix stays a
function of files on disk). Chunk plans say how the output arrives when streamed: a sub-axis of
every parse case, as a kwargs variant is of a render case.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from generator import canonical
from generator.config.request import validate_request
from generator.errors import GoldensError

FOLDER = "parse"  # goldens/<model>/parse/<shape>[--<variant>].json
FINISH_REASONS = ("stop", "length", "tool_calls")
PARSE_FIELDS = ("output", "finish_reason")  # what a parse request file may carry beside a chat body

_SYSTEM = {"role": "system", "content": "You are terse."}
_ASK = {"role": "user", "content": "What is the weather in Paris?"}


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required}}}


_CITY = {"city": {"type": "string", "description": "The city name."}}
TOOLS = [
    _tool("get_weather", "Get the current weather for a city.", _CITY, ["city"]),
    _tool("get_time", "Get the local time in a city.", _CITY, ["city"]),
    _tool("search", "Search records.", {
        "query": {"type": "string"},
        "filter": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "range": {"type": "object", "properties": {"from": {"type": "integer"}, "to": {"type": "integer"}}}}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    }, ["query"]),
    _tool("configure", "Set options.", {
        "verbose": {"type": "boolean"}, "limit": {"type": "integer"}, "offset": {"type": "integer"},
        "label": {"type": ["string", "null"]}}, ["verbose"]),
    _tool("get_status", "Get the service status.", {}, []),
    _tool("write_note", "Write a note.", {"text": {"type": "string"}}, ["text"]),
]
_IDS = ("a1b2c3d4e", "f5g6h7i8j", "k9l0m1n2o")  # nine alphanumerics: what Mistral's templates take
# A note long enough to cross every engine's buffering (about 1,000 characters, some 400 ids, no
# repetition a tokenizer could fold into a few ids); longer only multiplies the streamed plans' cost.
LONG_TEXT = " ".join(f"item {n} of the list is {'odd' if n % 2 else 'even'};" for n in range(1, 41))
# The delimiters of the tool-call formats of the families goldens knows, as text inside a value.
DELIMITERS = "</tool_call> <tool_call> <|call|> [TOOL_CALLS] <|python_tag|> <tool_call|> </function> ```"


def _call(name: str, arguments: dict[str, Any], n: int = 0) -> dict:
    return {"id": _IDS[n], "type": "function", "function": {"name": name, "arguments": arguments}}


def _case(assistant: dict, *, ask: dict = _ASK, tools: bool = True, **extra: Any) -> dict:
    body: dict[str, Any] = {"messages": [_SYSTEM, ask, {"role": "assistant", **assistant}]}
    if tools:
        body["tools"] = copy.deepcopy(TOOLS)
    body.update(extra)
    return body


def _calls(*calls: tuple[str, dict], content: str = "", reasoning: str | None = None) -> dict:
    message: dict[str, Any] = {"content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    message["tool_calls"] = [_call(name, args, n) for n, (name, args) in enumerate(calls)]
    return message


PARIS = ("get_weather", {"city": "Paris"})

# name -> (one-line description, builder). Order is the golden listing order. A builder's body
# may set `finish_reason` ("length": the output is cut half way through the content).
SHAPES: dict[str, tuple[str, Callable[[], dict]]] = {
    "answer": ("a plain answer", lambda: _case({"content": "It is sunny in Paris today."})),
    "reasoning-answer": ("reasoning, then the answer", lambda: _case({
        "content": "It is sunny.", "reasoning_content": "The user asks about Paris. It is sunny there."})),
    # the answer's content: where the template writes no empty block, the twin of `answer` (dropped)
    "reasoning-empty": ("an empty reasoning block, then the answer",
                        lambda: _case({"content": "It is sunny in Paris today.", "reasoning_content": ""})),
    "call": ("one tool call", lambda: _case(_calls(PARIS))),
    "parallel-calls": ("two tool calls in one turn",
                       lambda: _case(_calls(PARIS, ("get_time", {"city": "Paris"})))),
    "text-call": ("text before a tool call", lambda: _case(_calls(PARIS, content="Let me check the weather."))),
    "reasoning-call": ("reasoning, then a tool call", lambda: _case(_calls(
        PARIS, reasoning="The user wants the weather in Paris. I will call get_weather."))),
    "args-escaped": ("arguments with quotes, a backslash and a newline", lambda: _case(_calls(
        ("write_note", {"text": 'She said "hi" \\ then\nleft.'})))),
    "args-unicode": ("arguments with accents and CJK", lambda: _case(_calls(("get_weather", {"city": "Zürich 東京"})))),
    "args-nested": ("nested objects and arrays", lambda: _case(_calls(("search", {
        "query": "rain", "filter": {"tags": ["eu", "fr"], "range": {"from": 1, "to": 5}},
        "items": [{"id": 1}, {"id": 2}]})))),
    "args-empty": ("a call with no arguments: {}", lambda: _case(_calls(("get_status", {})))),
    "args-scalars": ("true, null and numbers as arguments", lambda: _case(_calls(("configure", {
        "verbose": True, "label": None, "limit": 3, "offset": -1})))),
    "args-delimiters": ("a string holding tool-call delimiters", lambda: _case(_calls(
        ("write_note", {"text": DELIMITERS})))),
    "args-long": ("a long argument", lambda: _case(_calls(("write_note", {"text": LONG_TEXT})))),
    "unknown-tool": ("a call to a tool not in `tools`", lambda: _case(_calls(("get_forecast", {"city": "Paris"})))),
    "think-literal": ("content holding a literal <think> tag", lambda: _case(
        {"content": "Put your notes between <think> and </think> tags."})),
    "cjk-emoji": ("CJK and emoji whose bytes split across ids", lambda: _case(
        {"content": "你好，世界！巴黎晴天 👋🏽 🇫🇷 ☀️"})),
    "cut": ("an answer cut off before its end (finish length)", lambda: _case(
        {"content": "The weather in Paris is sunny, with a light breeze from the west and 21 degrees."},
        finish_reason="length")),
}


def calls(shape: str) -> bool:
    """Whether the shape's assistant message holds a tool call."""
    return bool(SHAPES[shape][1]()["messages"][-1].get("tool_calls"))


def build(shape: str, chat_template_kwargs: dict[str, Any], *, tools: bool = True) -> dict:
    """A built-in parse shape's body, with the model's kwargs. `tools=False` for a model whose
    template writes no tool call (no call shape written): its clients send no tools, and a server
    with no tool parser for it refuses a body that does (vLLM's "auto" tool choice needs one)."""
    body = SHAPES[shape][1]()
    if not tools:
        body.pop("tools", None)
    body.setdefault("add_generation_prompt", False)
    body["chat_template_kwargs"] = dict(chat_template_kwargs)
    return body


def validate(body: Any, where: str) -> dict[str, Any]:
    """A parse request: a chat body (checked as `goldens render` checks one) whose last message
    is the assistant's, plus optional `output` (the raw text the model emitted, special tokens
    written as text) and `finish_reason`."""
    request = validate_request(body, where)
    messages = request["messages"]
    if not isinstance(messages[-1], dict) or messages[-1].get("role") != "assistant":
        raise GoldensError(f"{where}: a parse case ends in the assistant message the output should parse to")
    if len(messages) < 2:
        raise GoldensError(f"{where}: a parse case needs the conversation before the assistant message")
    output = body.get("output")
    if output is not None and (not isinstance(output, str) or not output):
        raise GoldensError(f"{where}: `output` is the text the model emitted, a non-empty string")
    finish = body.get("finish_reason")
    if finish is not None and finish not in FINISH_REASONS:
        raise GoldensError(f"{where}: `finish_reason` is one of {', '.join(FINISH_REASONS)}")
    for name in PARSE_FIELDS:
        if body.get(name) is not None:
            request[name] = body[name]
    return request


@dataclass(frozen=True)
class Split:
    """A parse case's parts: the chat body engines get (the conversation before the assistant
    message, with a generation prompt), the assistant message, and the raw output if given."""

    chat: dict[str, Any]
    assistant: dict[str, Any]
    output: str | None
    finish_reason: str | None


def split(request: dict[str, Any]) -> Split:
    chat = {k: copy.deepcopy(v) for k, v in request.items() if k not in PARSE_FIELDS}
    assistant = chat["messages"].pop()
    chat["add_generation_prompt"] = True
    chat["continue_final_message"] = False
    return Split(chat=chat, assistant=assistant, output=request.get("output"),
                 finish_reason=request.get("finish_reason"))


# ------------------------------------------------------------------ chunk plans

@dataclass(frozen=True)
class Plan:
    """How an output arrives: `sizes` None is one non-streamed answer, else ids per step."""

    name: str
    sizes: tuple[int, ...] | None

    @property
    def streamed(self) -> bool:
        return self.sizes is not None


SPLITS_UP_TO = 64  # every two-way split for outputs of at most this many ids
FIXED = 3  # ids per step of the fixed-size plan
SEEDS = (1, 2, 3)  # the seeded random plans, steps of 1 to RANDOM_STEP ids
RANDOM_STEP = 8


def plans(n: int) -> list[Plan]:
    """Every plan for an output of n ids: whole; one id per step; the whole output in one step;
    a fixed size; every two-way split (n <= SPLITS_UP_TO); a few seeded random plans. Plans
    that cut the same way are listed once, under the first name."""
    out = [Plan("whole", None), Plan("ids-1", (1,) * n), Plan("one-step", (n,))]
    out.append(Plan(f"ids-{FIXED}", tuple([FIXED] * (n // FIXED) + ([n % FIXED] if n % FIXED else []))))
    if n <= SPLITS_UP_TO:
        out += [Plan(f"split-{k}", (k, n - k)) for k in range(1, n)]
    for seed in SEEDS:
        rng = random.Random(seed * 1_000_003 + n)
        sizes, left = [], n
        while left:
            step = min(left, rng.randint(1, RANDOM_STEP))
            sizes.append(step)
            left -= step
        out.append(Plan(f"random-{seed}", tuple(sizes)))
    seen: set[tuple[int, ...] | None] = set()
    unique = []
    for plan in out:
        if plan.sizes not in seen and n > 0:
            seen.add(plan.sizes)
            unique.append(plan)
    return unique


def plan_named(name: str, n: int) -> Plan:
    for plan in plans(n):
        if plan.name == name:
            return plan
    raise GoldensError(f"no chunk plan {name!r} for an output of {n} ids")


# ------------------------------------------------------------------ the lock's record

def selection(model) -> str:
    """What the written shapes were decided from, beside the template and tokenizer: the shapes
    asked, the end tokens and every variant's kwargs."""
    spec = model.parse
    return canonical.digest({"shapes": list(spec.shapes), "end": list(spec.end), "kwargs": model.kwargs,
                             "variants": model.variants})


def attach(model, entry: dict[str, Any] | None):
    """The model with the written shapes its lock entry records, when that entry was decided from
    this very selection (else not probed: None)."""
    if model.parse is None:
        return model
    record = (entry or {}).get("parse")
    fits = (isinstance(record, dict) and record.get("selection") == selection(model)
            and isinstance(record.get("written"), dict) and set(record["written"]) == set(model.variants)
            and all(isinstance(v, list) and set(v) <= set(model.parse.shapes) for v in record["written"].values()))
    shapes = {v: tuple(names) for v, names in record["written"].items()} if fits else None
    return dataclasses.replace(model, parse=dataclasses.replace(model.parse, written=shapes))


