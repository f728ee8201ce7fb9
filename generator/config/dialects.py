"""Dialects: the ways real clients spell the same conversation, as a matrix axis.

Engines drift in their request layers (how a body is parsed, normalized and validated before any
template runs), and what triggers it is the *dialect* of a body, not the conversation's
structure: tool-call arguments as a JSON string, content as text parts or missing, `reasoning`
for `reasoning_content`, a tool definition with `strict`, a `developer` message, a
`tool_choice`. Each dialect here is a named, pure transform of a built-in shape's request,
applied to the shapes it names and only where the shape has what it rewrites (None otherwise).
A dialect case is named `<shape>_<dialect>` and rendered with the model's default kwargs only.

Which of them a model keeps is chosen by what they reach (`choose`): a dialect case is kept when
its reference render (outcome, ids, error) or its normalization record differs from the base
shape's and from every dialect case already kept on that shape, when it shows an invariant
finding kind (a dropped message or call) none of them shows, or when it carries request fields
engines act on that the reference cannot see (tool_choice, parallel_tool_calls,
response_format). The choice is written to the lock beside models.yaml (models.dialects.lock,
generator/locks.py), so `goldens regenerate` is deterministic and fast; `goldens regenerate
--rechoose-dialects` chooses again. docs/dialects.md lists the axis, the chosen sets and what
the engines made of them.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator.config.request import engine_fields
from generator.config.shapes import SHAPES
from generator.config.shapes import build as build_shape

SEPARATOR = "_"  # <shape>_<dialect>: built-in shape and dialect names hold no '_'
Request = dict[str, Any]


@dataclass(frozen=True)
class Dialect:
    name: str
    description: str
    shapes: tuple[str, ...]  # the built-in shapes it is applied to
    transform: Callable[[Request], Request | None]  # a copy of the request in; None: nothing to rewrite
    # what it changes is how an engine's request layer matches a tool result to its call (harmony,
    # mistral-common): the reference may render it as the base shape, so it is kept once per model,
    # as the request fields engines act on are
    engine_keyed: bool = False
    # generated from the schemas engines accept (derived.py): kept only for what it reaches
    # (template lines, normalization rules, invariant findings, request-field values) that
    # nothing before it does, not for a render merely unlike its base's
    derived: bool = False

    def apply(self, request: Request) -> Request | None:
        return self.transform(copy.deepcopy(request))


# ------------------------------------------------------------------ helpers


def _messages(request: Request, role: str) -> list[dict[str, Any]]:
    return [m for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == role]


def _calls(request: Request) -> list[dict[str, Any]]:
    return [call for m in _messages(request, "assistant") for call in m.get("tool_calls") or []
            if isinstance(call, dict)]


def _with_calls(change: Callable[[dict[str, Any]], bool]) -> Callable[[Request], Request | None]:
    """A transform rewriting every tool call in place (`change` says whether it changed one)."""
    def transform(request: Request) -> Request | None:
        changed = [change(call) for call in _calls(request)]
        return request if any(changed) else None
    return transform


def _arguments(spell: Callable[[Any], str]) -> Callable[[dict[str, Any]], bool]:
    def change(call: dict[str, Any]) -> bool:
        function = call.get("function")
        if not isinstance(function, dict) or "arguments" not in function:
            return False
        arguments = function["arguments"]
        if isinstance(arguments, str):
            arguments = json.loads(arguments or "{}")
        function["arguments"] = spell(arguments)
        return True
    return change


def _drop(key: str) -> Callable[[dict[str, Any]], bool]:
    def change(item: dict[str, Any]) -> bool:
        return item.pop(key, None) is not None
    return change


def _results(change: Callable[[dict[str, Any]], bool]) -> Callable[[Request], Request | None]:
    def transform(request: Request) -> Request | None:
        changed = [change(m) for m in _messages(request, "tool")]
        return request if any(changed) else None
    return transform


def _parts(text: str, split: bool) -> list[dict[str, str]]:
    """Text as OpenAI text parts: one part, or two (split at the first space after the middle,
    else in the middle)."""
    if split and len(text) > 1:
        cut = text.find(" ", len(text) // 2)
        if cut > 0:
            return [{"type": "text", "text": text[:cut]}, {"type": "text", "text": text[cut + 1:]}]
        return [{"type": "text", "text": text[:len(text) // 2]}, {"type": "text", "text": text[len(text) // 2:]}]
    return [{"type": "text", "text": text}]


def _content_as_parts(roles: tuple[str, ...], split: bool) -> Callable[[Request], Request | None]:
    def transform(request: Request) -> Request | None:
        done = False
        for role in roles:
            for message in _messages(request, role):
                if isinstance(message.get("content"), str) and message["content"]:
                    message["content"] = _parts(message["content"], split)
                    done = True
        return request if done else None
    return transform


def _tool_call_content(spell: str) -> Callable[[Request], Request | None]:
    """The content of every assistant tool-call turn as null, missing or []."""
    def transform(request: Request) -> Request | None:
        turns = [m for m in _messages(request, "assistant") if m.get("tool_calls")]
        for message in turns:
            if spell == "missing":
                message.pop("content", None)
            else:
                message["content"] = None if spell == "null" else []
        return request if turns else None
    return transform


def _reasoning(spell: str) -> Callable[[Request], Request | None]:
    def transform(request: Request) -> Request | None:
        turns = [m for m in _messages(request, "assistant") if "reasoning_content" in m]
        for message in turns:
            reasoning = message.pop("reasoning_content")
            if spell == "reasoning":
                message["reasoning"] = reasoning
            else:
                message["content"] = f"<think>\n{reasoning}\n</think>\n\n{message.get('content') or ''}"
        return request if turns else None
    return transform


def _tools(change: Callable[[list[dict[str, Any]]], None]) -> Callable[[Request], Request | None]:
    def transform(request: Request) -> Request | None:
        if not request.get("tools"):
            return None
        change(request["tools"])
        return request
    return transform


def _reordered(tools: list[dict[str, Any]]) -> None:
    """Every key order reversed: the tool's, its function's, its parameters' and properties'."""
    def reverse(mapping: dict[str, Any]) -> dict[str, Any]:
        return dict(reversed(list(mapping.items())))
    for i, tool in enumerate(tools):
        function = reverse(tool["function"])
        if isinstance(function.get("parameters"), dict):
            parameters = reverse(function["parameters"])
            if isinstance(parameters.get("properties"), dict):
                parameters["properties"] = reverse(parameters["properties"])
            function["parameters"] = parameters
        tools[i] = reverse({**tool, "function": function})


def _strict(tools: list[dict[str, Any]]) -> None:
    """What a Pydantic or Agents-SDK frontend adds: strict, additionalProperties, titles."""
    for tool in tools:
        function = tool["function"]
        function["strict"] = True
        parameters = function.get("parameters")
        if isinstance(parameters, dict):
            parameters["title"] = function["name"]
            parameters["additionalProperties"] = False
            for name, prop in (parameters.get("properties") or {}).items():
                prop["title"] = name.title()


def _no_params(tools: list[dict[str, Any]]) -> None:
    """Tools that take nothing, both ways clients say it: an empty object schema, no key."""
    tools[0]["function"]["parameters"] = {"type": "object", "properties": {}}
    if len(tools) > 1:
        tools[-1]["function"].pop("parameters", None)


def _system(spell: str) -> Callable[[Request], Request | None]:
    def transform(request: Request) -> Request | None:
        messages = request["messages"]
        system = [m for m in messages if m.get("role") == "system"]
        if not system:
            return None
        if spell == "developer":
            for message in system:
                message["role"] = "developer"
        elif spell == "two":
            messages.insert(messages.index(system[-1]) + 1, {"role": "system", "content": "Answer in English."})
        else:  # mid: a second system message before the last user turn
            last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
            if last_user == 1:
                return None
            messages.insert(last_user, {"role": "system", "content": "Answer in English."})
        return request
    return transform


def _user_name(request: Request) -> Request | None:
    users = _messages(request, "user")
    for message in users:
        message["name"] = "alice"
    return request if users else None


def _ends_assistant(request: Request) -> Request | None:
    if request.get("continue_final_message") or request["messages"][-1].get("role") != "user":
        return None
    request["messages"].append({"role": "assistant", "content": "4."})
    return request


def _fields(**fields: Any) -> Callable[[Request], Request | None]:
    """Request fields engines act on and no template sees."""
    def transform(request: Request) -> Request | None:
        if "tool_choice" in fields and not request.get("tools"):
            return None
        request.update(copy.deepcopy(fields))
        return request
    return transform


# The spellings outside bodies showed that the axis above did not (bench/outside, docs/findings.md).


def _ends_call(request: Request) -> Request | None:
    """The conversation ends in the assistant's tool-call turn: the tool results after it dropped."""
    messages = request["messages"]
    while messages and messages[-1].get("role") == "tool":
        messages.pop()
    return request if messages and messages[-1].get("tool_calls") else None


def _call_with_text(request: Request) -> Request | None:
    """Text beside the tool calls of an assistant turn (the base shapes send "")."""
    turns = [m for m in _messages(request, "assistant") if m.get("tool_calls")]
    for message in turns:
        message["content"] = "Let me check the weather."
    return request if turns else None


def _drop_system(request: Request) -> Request | None:
    messages = request["messages"]
    kept = [m for m in messages if m.get("role") != "system"]
    if len(kept) == len(messages):
        return None
    request["messages"] = kept
    return request


def _system_only(request: Request) -> Request | None:
    """Nothing but the system message (an SDK's minimal body is one developer/system message)."""
    system = _messages(request, "system")
    if not system:
        return None
    request["messages"] = system[:1]
    return request


def _two_assistants(request: Request) -> Request | None:
    if request.get("continue_final_message") or request["messages"][-1].get("role") != "user":
        return None
    request["messages"] += [{"role": "assistant", "content": "4."}, {"role": "assistant", "content": "Four."}]
    return request


def _two_rounds(request: Request) -> Request | None:
    """A second call and its result after the first (the model called, read, called again)."""
    messages = request["messages"]
    calls = [m for m in messages if m.get("role") == "assistant" and m.get("tool_calls")]
    if not calls or messages[-1].get("role") != "tool":
        return None
    call = copy.deepcopy(calls[-1]["tool_calls"][0])
    call["id"] = "k9l8m7n6o"
    call["function"]["name"] = "get_time"
    messages += [{"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "name": "get_time", "content": "noon"}]
    return request


def _starts_call(request: Request) -> Request | None:
    """The conversation starts at the assistant's tool call (a converter's output with no user turn)."""
    messages = request["messages"]
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")), None)
    if not first:
        return None
    request["messages"] = messages[first:]
    return request


def _empty_description(tools: list[dict[str, Any]]) -> None:
    """The first tool's description "" (llama.cpp's own test tool has one)."""
    tools[0]["function"]["description"] = ""


def _loose_type(tools: list[dict[str, Any]]) -> None:
    """A property typed `int` (not a JSON-schema type) as hand-written tool lists have it."""
    for tool in tools:
        parameters = tool["function"].get("parameters")
        if isinstance(parameters, dict):
            parameters.setdefault("properties", {})["days"] = {"type": "int", "description": "How many days."}


def _null_fields(request: Request) -> Request | None:
    """`name: null` on every message and `tool_calls: null` on assistant turns without calls, as
    huggingface_hub's client serializes its dataclasses."""
    messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
    if not messages:
        return None
    for message in messages:
        message.setdefault("name", None)
        if message.get("role") == "assistant":
            message.setdefault("tool_calls", None)
    return request


def _no_tool_type(tools: list[dict[str, Any]]) -> None:
    """Tool definitions without `"type": "function"` (hand-written lists, some SDKs)."""
    for tool in tools:
        tool.pop("type", None)


def _markup_chars(tools: list[dict[str, Any]]) -> None:
    """A description with ' < > & in it: JSON filters differ on escaping them (minijinja's
    tojson writes \\u0027, \\u003c, ...; Python's json.dumps does not)."""
    tools[0]["function"]["description"] = "Get the city's weather (<city> & country)."


def _multiline_description(tools: list[dict[str, Any]]) -> None:
    """A description over two lines, as docstring-derived tools have it."""
    tools[0]["function"]["description"] = "Get the current weather for a city.\nReturns a short text."


def _think_chunk(request: Request) -> Request | None:
    """Mistral's thinking content part: the reasoning as a `thinking` part (a list of text
    chunks) before the answer's text part."""
    turns = [m for m in _messages(request, "assistant") if "reasoning_content" in m]
    for message in turns:
        reasoning = message.pop("reasoning_content")
        message["content"] = [{"type": "thinking", "thinking": [{"type": "text", "text": reasoning}]},
                              {"type": "text", "text": message.get("content") or ""}]
    return request if turns else None


def _long_call_id(request: Request) -> Request | None:
    """A tool-call id as OpenAI writes them (`call_` and 24 characters), not Mistral's nine."""
    calls = _calls(request)
    for call in calls:
        old = call.get("id")
        call["id"] = f"call_{old}{'0' * 15}"[:29] if isinstance(old, str) else "call_0"
        for message in _messages(request, "tool"):
            if message.get("tool_call_id") == old:
                message["tool_call_id"] = call["id"]
    return request if calls else None


def _tools_empty(request: Request) -> Request | None:
    request["tools"] = []
    return request


def _starts_result(request: Request) -> Request | None:
    """The conversation starts at a tool result: no call before it (a trimmed history)."""
    messages = request.get("messages") or []
    first = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "tool"), None)
    if first is None:
        return None
    system = [m for m in messages[:first] if isinstance(m, dict) and m.get("role") == "system"]
    request["messages"] = system + messages[first:]
    return request


def _user_after_tool(request: Request) -> Request | None:
    """A user turn right after the tool result (the user speaks before the assistant answers)."""
    messages = request.get("messages") or []
    if not messages or not isinstance(messages[-1], dict) or messages[-1].get("role") != "tool":
        return None
    messages.append({"role": "user", "content": "And in Lyon?"})
    return request


def _function_role(request: Request) -> Request | None:
    """The tool result as OpenAI's legacy function message: role `function`, the function's name,
    no tool_call_id (LangChain's FunctionMessage, pre-tools clients)."""
    messages = request.get("messages") or []
    results = [m for m in messages if isinstance(m, dict) and m.get("role") == "tool"]
    if not results:
        return None
    for message in results:
        name, content = message.get("name") or "get_weather", message.get("content")
        message.clear()
        message.update({"role": "function", "name": name, "content": content})
    return request


NAMED = {"type": "function", "function": {"name": "get_weather"}}
SCHEMA = {"type": "json_schema", "json_schema": {
    "name": "answer", "strict": True,
    "schema": {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
               "additionalProperties": False},
}}

# Order is the choice's order (an earlier dialect is kept first) and the golden listing order.
DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    # tool-call arguments (`tool-result` sends an object, `tool-result-json-args` spaced JSON)
    Dialect("args-compact", "tool-call arguments as a compact JSON string", ("tool-result",),
            _with_calls(_arguments(lambda a: json.dumps(a, separators=(",", ":"))))),
    Dialect("args-pretty", "tool-call arguments as a pretty-printed JSON string", ("tool-result",),
            _with_calls(_arguments(lambda a: json.dumps(a, indent=2)))),
    Dialect("args-empty", 'tool-call arguments as ""', ("tool-result",), _with_calls(_arguments(lambda a: ""))),
    Dialect("args-empty-object", 'tool-call arguments as "{}"', ("tool-result",),
            _with_calls(_arguments(lambda a: "{}"))),
    # content
    Dialect("one-part", "system and user content as one text part each", ("plain",),
            _content_as_parts(("system", "user"), split=False)),
    Dialect("parts", "system, user and assistant content as two text parts each", ("multi-turn",),
            _content_as_parts(("system", "user", "assistant"), split=True)),
    Dialect("tool-parts", "tool result content as text parts", ("tool-result",),
            _content_as_parts(("tool",), split=True)),
    Dialect("content-null", "the tool-call turn's content null", ("tool-result",), _tool_call_content("null")),
    Dialect("content-missing", "the tool-call turn with no content key", ("tool-result",),
            _tool_call_content("missing")),
    Dialect("content-empty-list", "the tool-call turn's content []", ("tool-result",), _tool_call_content("[]")),
    # reasoning
    Dialect("reasoning", "reasoning_content spelled reasoning", ("reasoning-history", "agentic-turn"),
            _reasoning("reasoning")),
    Dialect("think-inline", "reasoning inline as a <think> block in content", ("reasoning-history",),
            _reasoning("inline")),
    # tool calls and results
    Dialect("call-no-id", "tool calls without id", ("tool-result",), _with_calls(_drop("id"))),
    Dialect("call-no-type", "tool calls without type", ("tool-result",), _with_calls(_drop("type"))),
    Dialect("result-no-name", "tool results (two in a row) without name", ("parallel-tool-calls",),
            _results(_drop("name"))),
    Dialect("result-no-call-id", "tool results (two in a row) without tool_call_id", ("parallel-tool-calls",),
            _results(_drop("tool_call_id"))),
    # tool definitions
    Dialect("key-order", "tool definitions with every key order reversed", ("tools-reduced",), _tools(_reordered)),
    Dialect("strict", "tool definitions with strict, additionalProperties and titles", ("tools-reduced",),
            _tools(_strict)),
    Dialect("no-params", "the first tool's parameters an empty object schema, the last one's missing",
            ("tools-reduced",), _tools(_no_params)),
    # system messages and roles (`no-system` is a shape of its own)
    Dialect("developer", "the system message as developer", ("plain",), _system("developer")),
    Dialect("two-systems", "two system messages in a row", ("plain",), _system("two")),
    Dialect("mid-system", "a second system message mid-conversation", ("multi-turn",), _system("mid")),
    Dialect("user-name", "name on user messages", ("plain",), _user_name),
    Dialect("ends-assistant", "the conversation ends in an assistant turn", ("plain",), _ends_assistant),
    # request fields engines act on
    Dialect("tool-choice-none", "tool_choice none", ("tools-reduced",), _fields(tool_choice="none")),
    Dialect("tool-choice-required", "tool_choice required, parallel_tool_calls false", ("tools-reduced",),
            _fields(tool_choice="required", parallel_tool_calls=False)),
    Dialect("tool-choice-named", "tool_choice naming get_weather", ("tools-reduced",), _fields(tool_choice=NAMED)),
    Dialect("response-format", "response_format json_schema", ("plain",), _fields(response_format=SCHEMA)),
    # from outside bodies (bench/outside): appended, so the cases chosen before them stay chosen
    Dialect("ends-call", "the conversation ends in the assistant's tool-call turn", ("tool-result-json-args",),
            _ends_call),
    Dialect("call-with-text", "text beside the tool call in the assistant turn", ("tool-result-json-args",),
            _call_with_text),
    Dialect("drop-system", "the tool conversation without its system message", ("tool-result-json-args",),
            _drop_system),
    Dialect("system-only", "the system message alone", ("plain",), _system_only),
    Dialect("two-assistants", "two assistant turns at the end", ("plain",), _two_assistants),
    Dialect("type-int", "a tool parameter typed int (not a JSON-schema type)", ("tools-reduced",), _tools(_loose_type)),
    Dialect("response-format-no-name", "response_format json_schema without a name", ("plain",),
            _fields(response_format={"type": "json_schema", "json_schema": {"schema": SCHEMA["json_schema"]["schema"]}})),
    Dialect("response-format-json-object", "response_format json_object with a schema", ("plain",),
            _fields(response_format={"type": "json_object", "schema": SCHEMA["json_schema"]["schema"]})),
    Dialect("result-by-name", "the tool result named, without tool_call_id", ("tool-result-json-args",),
            _results(_drop("tool_call_id")), engine_keyed=True),
    Dialect("two-rounds", "a second tool call and result after the first", ("tool-result-json-args",), _two_rounds),
    Dialect("starts-call", "the conversation starts at the assistant's tool call", ("tool-result-json-args",),
            _starts_call),
    Dialect("empty-description", "the first tool's description empty", ("tools-reduced",), _tools(_empty_description)),
    # from the second batch of outside bodies (bench/outside/bodies2): appended likewise
    Dialect("null-fields", "name null on every message, tool_calls null on assistant turns", ("multi-turn",),
            _null_fields, engine_keyed=True),
    Dialect("tool-no-type", 'tool definitions without "type": "function"', ("tools-reduced",),
            _tools(_no_tool_type), engine_keyed=True),
    Dialect("markup-chars", "a tool description with ' < > & in it", ("tools-reduced",), _tools(_markup_chars)),
    Dialect("multiline-description", "the first tool's description over two lines", ("tools-reduced",),
            _tools(_multiline_description)),
    Dialect("think-chunk", "reasoning as a Mistral thinking content part before the text part",
            ("reasoning-history",), _think_chunk, engine_keyed=True),
    Dialect("args-invalid", "tool-call arguments that are not JSON", ("tool-result",),
            _with_calls(_arguments(lambda a: "oops"))),
    Dialect("call-id-long", "tool-call ids of OpenAI's length, not nine characters", ("tool-result-json-args",),
            _long_call_id, engine_keyed=True),  # NeMo's template refuses it as it refuses a missing id
    Dialect("tools-empty", "tools: []", ("plain",), _tools_empty, engine_keyed=True),
    Dialect("starts-result", "the conversation starts at a tool result", ("tool-result-json-args",), _starts_result),
    Dialect("user-after-tool", "a user turn right after the tool result", ("tool-result-json-args",),
            _user_after_tool),
    # reasoning_effort, a request field both servers turn into template kwargs (the second batch's
    # vllm-reasoning-effort-none body): kept once per model as the other request fields are
    Dialect("effort-none", "reasoning_effort none", ("plain",), _fields(reasoning_effort="none")),
    Dialect("effort-high", "reasoning_effort high", ("plain",), _fields(reasoning_effort="high")),
    # bodies the loader once refused (bench/outside/unwired): TGI's bare tool name as tool_choice,
    # which both servers refuse, and LangChain's legacy `function` role for a tool's result
    Dialect("tool-choice-bare", "tool_choice as a bare tool name (TGI's spelling)", ("tools-reduced",),
            _fields(tool_choice="get_weather")),
    Dialect("function-role", "the tool result as a legacy `function` role message", ("tool-result-json-args",),
            _function_role, engine_keyed=True),
)}


def _derived() -> dict[str, Dialect]:
    """The derived dialects of requests/schema.derived.lock (derived.py), after the hand-written ones:
    those are the generator's seeds, chosen first."""
    from generator.config import derived

    return {row.name: Dialect(row.name, derived.describe(row), (row.shape,),
                              lambda request, row=row: derived.apply(row, request), derived=True)
            for row in derived.read_lock()}


WRITTEN = tuple(DIALECTS)  # the hand-written dialects: what `dialects: all` selects
DIALECTS.update(_derived())
DERIVED = tuple(name for name in DIALECTS if name not in WRITTEN)  # `derived` in a dialects list


def selection(names: list[str]) -> tuple[str, ...]:
    """A dialects list as DIALECTS names, in DIALECTS order (`derived` stands for every derived
    dialect); KeyError names the first unknown one."""
    wanted = set(names)
    for name in names:
        if name != "derived" and name not in DIALECTS:
            raise KeyError(name)
    if "derived" in wanted:
        wanted |= set(DERIVED)
    return tuple(d for d in DIALECTS if d in wanted)


def case_name(shape: str, dialect: str) -> str:
    return f"{shape}{SEPARATOR}{dialect}"


def split(name: str) -> tuple[str, str] | None:
    """(shape, dialect) of a dialect case name, None for any other shape name."""
    shape, sep, dialect = name.partition(SEPARATOR)
    if sep and shape in SHAPES and dialect in DIALECTS and shape in DIALECTS[dialect].shapes:
        return shape, dialect
    return None


def request(name: str, chat_template_kwargs: dict[str, Any]) -> Request:
    """The full request of a dialect case (`<shape>_<dialect>`)."""
    found = split(name)
    if found is None:
        raise KeyError(name)
    shape, dialect = found
    out = DIALECTS[dialect].transform(build_shape(shape, chat_template_kwargs))  # built afresh: no copy
    if out is None:
        raise KeyError(name)
    return out


def candidates(shapes: tuple[str, ...], dialects: tuple[str, ...]) -> list[str]:
    """Every dialect case the model's shapes and selected dialects make, in DIALECTS order."""
    return list(_candidates(tuple(shapes), tuple(dialects)))


@functools.lru_cache(maxsize=64)  # every models.yaml load asks it per model; most share their shapes
def _candidates(shapes: tuple[str, ...], dialects: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for dialect in DIALECTS.values():
        if dialect.name not in dialects:
            continue
        for shape in dialect.shapes:  # built afresh: the transform may rewrite it, no copy needed
            if shape in shapes and dialect.transform(build_shape(shape, {})) is not None:
                out.append(case_name(shape, dialect.name))
    return tuple(out)


# ------------------------------------------------------------------ the choice


def render_key(rendered: Any) -> str:
    """What the template made of a request: outcome, ids and error."""
    return json.dumps([rendered.outcome, rendered.ids, rendered.error])


def normalization_key(rendered: Any) -> str | None:
    """The normalization rules a request reached in the reference (each applied line without its
    message path and counts, and the template's outcome on the body as sent); None: none."""
    record = rendered.normalization
    if not record:
        return None
    rules = sorted({re.sub(r"\d+", "N", re.sub(r"^messages\[\d+\][^:]*: ", "", line))
                    for line in record.get("applied", [])})
    return json.dumps([rules, (record.get("as_sent") or {}).get("outcome")])


def finding_kinds(kinds: Callable[[Request, Any], list[str]] | None, request: Request, rendered: Any) -> set[str]:
    """The invariant finding kinds of a render (what the template dropped or unbalanced)."""
    if kinds is None or rendered.outcome != "ok":
        return set()
    return set(kinds(request, rendered))


def choose(shapes: tuple[str, ...], dialects: tuple[str, ...], kwargs: dict[str, Any],
           render: Callable[[Request], Any], matrix: list[Request] = (),
           kinds: Callable[[Request, Any], list[str]] | None = None,
           lines: Callable[[Request], set[int]] | None = None) -> list[str]:
    """The minimal set of dialect cases, in candidates' order: a case is kept when it reaches
    something neither the model's matrix nor any case kept before reaches: a render (outcome,
    ids, error) unlike its base shape's and every kept case's on that shape, an invariant finding
    kind none of them shows (`kinds(request, rendered)`: a template that drops the text beside a
    call renders its base shape's ids, and the drop is what an outside body shows), a set of
    normalization rules no request of the matrix (`matrix`: the model's other requests, e.g.
    request files; the built-in shapes are added here) and no kept case reached, or request
    fields engines act on (with their values) no kept case sends. `render(request)` is the
    reference's Rendered. A derived dialect (generated, derived.py) is kept only when it reaches
    an atom nothing before it reached: a template line (`lines(request)`, traced), a
    normalization rule, an invariant finding kind, or one request field's value."""
    renders: dict[str, set[str]] = {}
    atoms: set | None = None
    found: dict[str, set[str]] = {}
    rules: set[str | None] = {None}
    fields: set[str] = {"{}"}
    for other in [*(build_shape(s, kwargs) for s in shapes if s in SHAPES), *matrix]:
        rules.add(normalization_key(render(other)))
        fields.add(json.dumps(engine_fields(other), sort_keys=True))
    kept = []
    for name in candidates(shapes, dialects):
        shape, _ = name.split(SEPARATOR, 1)
        if shape not in renders:
            base_request = build_shape(shape, kwargs)
            base = render(base_request)
            renders[shape] = {render_key(base)}
            found[shape] = finding_kinds(kinds, base_request, base)
            rules.add(normalization_key(base))
        case = request(name, kwargs)
        if DIALECTS[name.split(SEPARATOR, 1)[1]].derived:
            if atoms is None:
                atoms = _baseline_atoms(shapes, kwargs, matrix, kept, render, kinds, lines)
            found_atoms = _atoms(case, render(case), kinds, lines)
            if found_atoms - atoms:
                atoms |= found_atoms
                kept.append(name)
            continue
        rendered = render(case)
        reached = engine_fields(case)
        if DIALECTS[name.split(SEPARATOR, 1)[1]].engine_keyed:
            reached = {**reached, "engine-keyed": name.split(SEPARATOR, 1)[1]}
        marks = (render_key(rendered), normalization_key(rendered), json.dumps(reached, sort_keys=True),
                 finding_kinds(kinds, case, rendered))
        if marks[0] in renders[shape] and marks[1] in rules and marks[2] in fields and marks[3] <= found[shape]:
            continue
        renders[shape].add(marks[0])
        rules.add(marks[1])
        fields.add(marks[2])
        found[shape] |= marks[3]
        kept.append(name)
    return kept


def _atoms(case: Request, rendered: Any, kinds, lines) -> set:
    """What a request reaches, as atoms the derived dialects' choice counts."""
    out: set = {("field", key, json.dumps(value, sort_keys=True)) for key, value in engine_fields(case).items()}
    out |= {("rule", rule) for rule in (json.loads(normalization_key(rendered) or "[[]]")[0])}
    out |= {("finding", kind) for kind in finding_kinds(kinds, case, rendered)}
    out.add(("outcome", rendered.outcome, re.sub(r"\d+", "N", str(rendered.error or ""))[:120]))
    if lines is not None:
        out |= {("line", line) for line in lines(case)}
    return out


def _baseline_atoms(shapes, kwargs, matrix, kept, render, kinds, lines) -> set:
    """The atoms of the model's matrix: its shapes, request files and the dialect cases kept so far."""
    out: set = set()
    for other in [*(build_shape(s, kwargs) for s in shapes if s in SHAPES), *matrix, *(request(n, kwargs) for n in kept)]:
        out |= _atoms(other, render(other), kinds, lines)
    return out


# ------------------------------------------------------------------ the lock file


def read_lock(config_path: Path) -> dict[str, dict[str, list[str]]]:
    """model -> {"dialects": the selection chosen from, "cases": the kept cases}, from the lock
    beside the config (generator/locks.py: models.dialects.lock, or an older dialects.lock); {}
    without one."""
    from generator import locks
    from generator.errors import GoldensError

    models = locks.read(locks.DIALECTS, config_path)
    if models is None:
        return {}
    if not isinstance(models, dict) or not all(
        isinstance(entry, dict) and all(isinstance(entry.get(k), list) for k in ("dialects", "cases"))
        for entry in models.values()
    ):
        raise GoldensError(f"{locks.DIALECTS.found(config_path).name}: expected {{model: {{dialects: [...], "
                           "cases: [...]}}; delete it and run goldens regenerate --rechoose-dialects")
    return models


def write_lock(config_path: Path, models: dict[str, dict[str, list[str]]]) -> bool:
    """Write the lock beside the config (sorted models, deterministic bytes); True when the
    bytes changed."""
    from generator import locks

    return locks.write(locks.DIALECTS, config_path, {name: models[name] for name in sorted(models)})
