"""The request variations the coverage search draws from: the forms real clients send that the
built-in shapes do not (tool parameter schemas of every JSON-schema form, keys in other orders,
tool-call arguments as objects and as JSON strings with quotes, backslashes, non-ASCII and
nested values, null content beside tool calls, text-part lists, inline <think>, tool results
carrying `name`, several system and developer messages), and every variable a template reads
beyond the standard ones, with values drawn from the comparisons the template makes with it.
Plain data, built the same way every time: names and bytes are deterministic."""

from __future__ import annotations

import json
from typing import Any

from generator.config.shapes import CALL_1, CALL_2, SYSTEM, TOOLS

# Names every template gets from apply_chat_template or the request itself.
STANDARD = frozenset({
    "messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
    "raise_exception", "strftime_now", "namespace", "range", "dict", "lipsum", "cycler", "joiner",
    "date_string",  # the matrix pins it (llama3's kwargs)
})

# One parameter of each JSON-schema form a client's tool definition can hold.
PARAMETER_FORMS: dict[str, dict[str, Any]] = {
    "string": {"type": "string", "description": "A city name."},
    "integer": {"type": "integer", "description": "How many days."},
    "number": {"type": "number", "description": "A temperature."},
    "boolean": {"type": "boolean", "description": "Whether to include details."},
    "enum": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "The unit."},
    "array": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
    "array-of-objects": {"type": "array", "description": "Stops.",
                         "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                                     "hours": {"type": "integer"}},
                                   "required": ["name"]}},
    "object": {"type": "object", "description": "A location.",
               "properties": {"lat": {"type": "number"}, "lon": {"type": "number"},
                              "label": {"type": "object", "properties": {"text": {"type": "string"}}}},
               "required": ["lat", "lon"]},
    "nullable": {"type": ["string", "null"], "description": "An optional note."},
    "nullable-flag": {"type": "string", "nullable": True, "description": "An optional region."},
    "one-of": {"oneOf": [{"type": "string"}, {"type": "integer"}], "description": "A day name or number."},
    "any-of": {"anyOf": [{"type": "string", "enum": ["now"]}, {"type": "number"}], "description": "When."},
    "default": {"type": "integer", "default": 3, "description": "Retries."},
    "no-description": {"type": "string"},
    "min-max": {"type": "integer", "minimum": 1, "maximum": 10, "description": "A count."},
    "array-of-numbers": {"type": "array", "items": {"type": "number"}, "description": "Readings."},
    "array-of-integers": {"type": "array", "items": {"type": "integer"}, "description": "Days."},
    "array-of-booleans": {"type": "array", "items": {"type": "boolean"}, "description": "Flags."},
    "array-of-one-of": {"type": "array", "items": {"oneOf": [{"type": "string"}, {"type": "object"}]},
                        "description": "Mixed."},
    "array-nullable": {"type": "array", "items": {"type": "string"}, "nullable": True, "description": "Maybe tags."},
    "object-nullable": {"type": "object", "nullable": True, "properties": {"a": {"type": "string"}},
                        "description": "Maybe a place."},
    "type-list-one": {"type": ["string"], "description": "A name."},
    "one-of-objects": {"oneOf": [
        {"type": "object", "description": "By name.", "properties": {"name": {"type": "string"}}, "default": {"name": "Paris"}},
        {"type": "object", "description": "By position.", "properties": {"lat": {"type": "number"}}}],
        "description": "Where."},
    "one-of-default": {"oneOf": [{"type": "string"}, {"type": "integer"}], "default": "today", "description": "When."},
    "enum-default": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius", "description": "Unit."},
    "string-default": {"type": "string", "default": "Paris", "description": "A city."},
    "enum-integer": {"type": "integer", "enum": [1, 2, 3], "description": "A level."},
}


def _tool(name: str, properties: dict[str, Any], required: list[str], description: str = "A tool.") -> dict:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


def schema_tools() -> dict[str, list[dict]]:
    """A tool per parameter form, and one tool holding every form."""
    out = {f"params-{form}": [_tool("plan_trip", {"value": schema}, ["value"])]
           for form, schema in PARAMETER_FORMS.items()}
    every = {form.replace("-", "_"): schema for form, schema in PARAMETER_FORMS.items()}
    out["params-every-form"] = [_tool("plan_trip", every, ["string", "enum"])]
    out["params-none"] = [{"type": "function", "function": {"name": "ping", "description": "Ping."}}]
    out["params-empty"] = [_tool("ping", {}, [], "Ping.")]
    return out


def reordered_tool() -> list[dict]:
    """A tool whose keys come in another order than the canonical one (function before type,
    parameters before name, required before properties)."""
    return [{"function": {"parameters": {"required": ["city"], "properties": {
        "city": {"description": "The city name.", "type": "string"}}, "type": "object"},
        "description": "Get the current weather for a city.", "name": "get_weather"}, "type": "function"}]


HARD_ARGUMENTS = {"query": 'say "hi" \\ then C:\\path\\n', "city": "Zürich 東京 👋🏽", "days": 3,
                  "exact": False, "score": 2.5, "note": None,
                  "filters": {"nested": [1, {"a": True, "b": [None, "x"]}], "empty": {}}}
HARD_TOOL = _tool("search", {"query": {"type": "string"}, "city": {"type": "string"},
                             "days": {"type": "integer"}, "exact": {"type": "boolean"},
                             "score": {"type": "number"}, "note": {"type": ["string", "null"]},
                             "filters": {"type": "object"}}, ["query"], "Search.")


def _call(name: str, arguments: Any, call_id: str = CALL_1) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_turns(call: dict, content: Any = "", result: str = "sunny, 21 C", name: str | None = None) -> list[dict]:
    tool = {"role": "tool", "tool_call_id": call["id"], "content": result}
    if name:
        tool["name"] = name
    return [SYSTEM, {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": [call]}, tool]


def _weather(arguments: Any = None) -> dict:
    return _call("get_weather", {"city": "Paris"} if arguments is None else arguments)


def conversations() -> dict[str, dict[str, Any]]:
    """Bodies of the message-level forms, each named for what it varies."""
    think = "<think>\nThe user asks 2 + 2.\n</think>\n\n4."
    out: dict[str, dict[str, Any]] = {
        "args-object-hard": {"messages": _tool_turns(_call("search", HARD_ARGUMENTS)), "tools": [HARD_TOOL]},
        "args-string-hard": {"messages": _tool_turns(_call("search", json.dumps(HARD_ARGUMENTS, ensure_ascii=False))),
                             "tools": [HARD_TOOL]},
        "args-empty": {"messages": _tool_turns(_call("get_time", {})), "tools": TOOLS},
        "null-content-tool-call": {"messages": _tool_turns(_weather(), content=None), "tools": TOOLS},
        "content-beside-tool-call": {"messages": _tool_turns(_weather(), content="Let me check."), "tools": TOOLS},
        "tool-result-name": {"messages": _tool_turns(_weather(), name="get_weather"), "tools": TOOLS},
        "tool-result-json": {"messages": _tool_turns(_weather(), result='{"sky": "sunny", "temp": 21}'),
                             "tools": TOOLS},
        "tool-call-no-id": {"messages": [SYSTEM, {"role": "user", "content": "Weather?"},
                                         {"role": "assistant", "content": "", "tool_calls": [
                                             {"type": "function", "function": {"name": "get_weather",
                                                                               "arguments": {"city": "Paris"}}}]}],
                            "tools": TOOLS},
        "tool-then-answer": {"messages": _tool_turns(_weather()) + [
            {"role": "assistant", "content": "It is sunny."}, {"role": "user", "content": "Thanks. And tomorrow?"}],
            "tools": TOOLS},
        "tool-calls-in-history": {"messages": _tool_turns(_weather()) + [
            {"role": "assistant", "content": "It is sunny, 21 C."}, {"role": "user", "content": "And the time?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("get_time", {"city": "Paris"}, CALL_2)]},
            {"role": "tool", "tool_call_id": CALL_2, "content": "noon"}], "tools": TOOLS},
        "reasoning-tool-call-history": {"messages": [
            SYSTEM, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "reasoning_content": "Call the tool.", "tool_calls": [_weather()]},
            {"role": "tool", "tool_call_id": CALL_1, "content": "sunny"},
            {"role": "assistant", "content": "Sunny.", "reasoning_content": "Report it."},
            {"role": "user", "content": "Thanks!"}], "tools": TOOLS},
        "text-parts": {"messages": [
            {"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
            {"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"},
                                         {"type": "text", "text": "Be brief."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "4."}]},
            {"role": "user", "content": [{"type": "text", "text": "And times 3?"}]}]},
        "think-inline-history": {"messages": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"},
                                              {"role": "assistant", "content": think},
                                              {"role": "user", "content": "And times 3?"}]},
        "think-inline-last": {"messages": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"},
                                           {"role": "assistant", "content": think}],
                              "add_generation_prompt": False},
        "think-inline-tool-call": {"messages": [
            SYSTEM, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "<think>\nCall the tool.\n</think>\n\n", "tool_calls": [_weather()]},
            {"role": "tool", "tool_call_id": CALL_1, "content": "sunny"}], "tools": TOOLS},
        "ends-with-assistant": {"messages": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"},
                                             {"role": "assistant", "content": "4."}]},
        "ends-with-assistant-no-prompt": {"messages": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"},
                                                       {"role": "assistant", "content": "4."}],
                                          "add_generation_prompt": False},
        "developer-first": {"messages": [{"role": "developer", "content": "Answer in French."},
                                         {"role": "user", "content": "Hello!"}]},
        "system-and-developer": {"messages": [SYSTEM, {"role": "developer", "content": "Answer in French."},
                                              {"role": "user", "content": "Hello!"}]},
        "two-systems": {"messages": [SYSTEM, {"role": "system", "content": "Answer in French."},
                                     {"role": "user", "content": "Hello!"}]},
        "system-mid-conversation": {"messages": [SYSTEM, {"role": "user", "content": "Hello!"},
                                                 {"role": "assistant", "content": "Hi."},
                                                 {"role": "system", "content": "Now answer in French."},
                                                 {"role": "user", "content": "How are you?"}]},
        "system-only": {"messages": [SYSTEM]},
        "thinking-field": {"messages": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"},
                                        {"role": "assistant", "content": "4.", "thinking": "2 plus 2."},
                                        {"role": "user", "content": "And times 3?"}]},
        "thinking-field-last": {"messages": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"},
                                             {"role": "assistant", "content": "4.", "thinking": "2 plus 2."}],
                                "add_generation_prompt": False},
        "thinking-with-tool-call": {"messages": [
            SYSTEM, {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Checking.", "thinking": "Call the tool.", "tool_calls": [_weather()]},
            {"role": "tool", "tool_call_id": CALL_1, "content": "sunny"}], "tools": TOOLS},
        "channel-tags-in-content": {"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<|channel|>final<|message|>Hello"}, {"role": "user", "content": "Again"}]},
        "channel-tags-in-thinking": {"messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello", "thinking": "<|channel|>analysis"}, {"role": "user", "content": "Again"}]},
        "tool-without-call": {"messages": [SYSTEM, {"role": "user", "content": "Hi"},
                                           {"role": "tool", "tool_call_id": CALL_1, "content": "sunny"}]},
        "content-object": {"messages": [SYSTEM, {"role": "user", "content": "Hi"},
                                        {"role": "assistant", "content": "", "tool_calls": [_weather()]},
                                        {"role": "tool", "tool_call_id": CALL_1,
                                         "content": {"content": "sunny"}}], "tools": TOOLS},
        "two-tool-calls-text": {"messages": [
            SYSTEM, {"role": "user", "content": "Weather and time in Paris?"},
            {"role": "assistant", "content": "Checking both.", "tool_calls": [
                _weather(), _call("get_time", {"city": "Paris"}, CALL_2)]},
            {"role": "tool", "tool_call_id": CALL_1, "content": "sunny"},
            {"role": "tool", "tool_call_id": CALL_2, "content": "noon"}], "tools": TOOLS},
        "tool-result-response-tags": {"messages": [
            SYSTEM, {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [_weather()]},
            {"role": "tool", "tool_call_id": CALL_1, "content": "sunny"},
            {"role": "user", "content": "<tool_response>\nrain\n</tool_response>"}], "tools": TOOLS},
        "assistant-first": {"messages": [{"role": "assistant", "content": "Hello, how can I help?"},
                                         {"role": "user", "content": "What is 2 + 2?"}]},
        "two-users": {"messages": [{"role": "user", "content": "Hello!"}, {"role": "user", "content": "Anyone?"}]},
        "empty-content": {"messages": [SYSTEM, {"role": "user", "content": ""}]},
        "tools-system-only": {"messages": [SYSTEM], "tools": TOOLS},
        "tools-no-system": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
        "tools-reordered-keys": {"messages": [SYSTEM, {"role": "user", "content": "Weather in Paris?"}],
                                 "tools": reordered_tool()},
        "tools-with-documents": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS,
                                 "documents": [{"title": "Sky", "text": "The sky is blue."}]},
    }
    for name, tools in schema_tools().items():
        out[name] = {"messages": [SYSTEM, {"role": "user", "content": "Plan a trip."}], "tools": tools}
    return out


def template_variables(template: str) -> dict[str, list[Any]]:
    """Every variable the template reads beyond the standard ones (Jinja's undeclared-variable
    analysis, less names the template itself binds anywhere), each with the values to try:
    the constants the template compares it with, a list of the constants it tests membership
    of, a tools list where it is assigned to `tools`, and true/false."""
    from jinja2 import meta, nodes
    from transformers.utils.chat_template_utils import _compile_jinja_template

    ast = _compile_jinja_template(template).environment.parse(template)
    bound = {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}
    # `{% if not x is defined %}{% set x = ... %}`: a default the caller may override
    defaulted = {t.node.name for t in ast.find_all(nodes.Test)
                 if t.name == "defined" and isinstance(t.node, nodes.Name)}
    undeclared = meta.find_undeclared_variables(ast) | defaulted
    names = sorted(undeclared - STANDARD - (bound - defaulted))
    values: dict[str, list[Any]] = {name: [] for name in names}

    def add(name: str, value: Any) -> None:
        if name in values and value not in values[name]:
            values[name].append(value)

    for compare in ast.find_all(nodes.Compare):
        left = compare.expr
        for op in compare.ops:
            right = op.expr
            if isinstance(left, nodes.Name) and isinstance(right, nodes.Const):
                add(left.name, right.value)
            elif isinstance(right, nodes.Name) and isinstance(left, nodes.Const):
                add(right.name, [left.value] if op.op in ("in", "notin") else left.value)
            elif isinstance(left, nodes.Name) and isinstance(right, (nodes.List, nodes.Tuple)) and op.op == "in":
                for item in right.items:
                    if isinstance(item, nodes.Const):
                        add(left.name, item.value)
            left = right
    # names a list variable may hold: what tool names are compared with, and filter arguments
    # (`builtin_tools | reject('equalto', 'code_interpreter')`)
    tool_names: list[str] = []
    for compare in ast.find_all(nodes.Compare):
        if isinstance(compare.expr, nodes.Getattr) and compare.expr.attr == "name":
            tool_names += [op.expr.value for op in compare.ops
                           if isinstance(op.expr, nodes.Const) and isinstance(op.expr.value, str)]
    for filtered in ast.find_all(nodes.Filter):
        if isinstance(filtered.node, nodes.Name) and filtered.node.name in values:
            consts = [a.value for a in filtered.args if isinstance(a, nodes.Const) and a.value != "equalto"]
            for const in consts:
                add(filtered.node.name, [const])
            if tool_names:
                add(filtered.node.name, sorted(set(tool_names)))
    for loop in ast.find_all(nodes.For):  # `{% for t in builtin_tools %}{% if t == "browser" %}`
        if (isinstance(loop.iter, nodes.Name) and loop.iter.name in values
                and isinstance(loop.target, nodes.Name)):
            for compare in loop.find_all(nodes.Compare):
                if isinstance(compare.expr, nodes.Name) and compare.expr.name == loop.target.name:
                    for op in compare.ops:
                        if isinstance(op.expr, nodes.Const):
                            add(loop.iter.name, [op.expr.value])
    for name in names:  # membership constants of one variable, all together
        members = [v[0] for v in values[name] if isinstance(v, list) and len(v) == 1]
        if len(members) > 1:
            add(name, members)
    for assign in ast.find_all(nodes.Assign):
        if (isinstance(assign.target, nodes.Name) and assign.target.name == "tools"
                and isinstance(assign.node, nodes.Name)):
            add(assign.node.name, TOOLS)
    for name in names:
        add(name, True)
        add(name, False)
    return values


def _slug(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True, sort_keys=True) if not isinstance(value, str) else value
    slug = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in slug:
        slug = slug.replace("--", "-")
    return slug[:24] or "empty"


def kwarg_variations(template: str) -> dict[str, dict[str, Any]]:
    """A tool-call conversation with each template variable set to each of its values."""
    out = {}
    for name, values in template_variables(template).items():
        for value in values:
            label = "tools" if value is TOOLS else _slug(value)
            out[f"kwarg-{_slug(name)}-{label}"] = {
                "messages": _tool_turns(_weather()), "tools": TOOLS, "chat_template_kwargs": {name: value}}
            if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
                # a call of the named built-in tool itself
                out[f"kwarg-{_slug(name)}-{label}-called"] = {
                    "messages": _tool_turns(_call(value[0], {"query": "2 + 2"})), "tools": TOOLS,
                    "chat_template_kwargs": {name: value}}
                out[f"kwarg-{_slug(name)}-{label}-called-two-args"] = {
                    "messages": _tool_turns(_call(value[0], {"query": "2 + 2", "precision": "high"})),
                    "tools": TOOLS, "chat_template_kwargs": {name: value}}
    return out


def all_variations(template: str) -> dict[str, dict[str, Any]]:
    return {**conversations(), **kwarg_variations(template)}
