"""Shapes inside a template's capabilities: what a template takes (probed by
generator/analysis/capabilities.py, recorded in `models.capabilities.lock` beside models.yaml)
and, for a shape that needs what the template refuses, a form it takes, as minja's polyfills
give one (llama.cpp's generic chat path applies them): the system text moved into the first user
turn, tool results as user turns, tool calls as assistant text, no tool definitions.

The polyfilled form is a case of its own (`<shape>_polyfilled`), beside the refusal golden of the
shape as sent: a model whose template refuses the system role or the tool role still gets the
rest of its conversation rendered and checked. The lock keeps the matrix a function of files on
disk (no render to list cases), so a no-change regenerate stays a read of the index.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from generator.errors import GoldensError

# What a template may lack, in the order a polyfill applies; each is "yes" (rendered), "ignored"
# (rendered without it: the text is not in the prompt) or "refused" (the template raises).
CAPABILITIES = ("system_role", "tools", "tool_calls", "tool_responses", "parallel_tool_calls")
STATES = ("yes", "ignored", "refused")
SUFFIX = "_polyfilled"
# the capabilities a polyfill can stand in for (parallel calls have no faithful form)
POLYFILLABLE = ("system_role", "tools", "tool_calls", "tool_responses")


def attach(config):
    """The config with each model's recorded capabilities (models.yaml's own load calls it)."""
    import dataclasses

    from generator.config import parse_cases

    entries = load_lock(config.path)
    for name, model in list(config.models.items()):
        if name in entries:
            model = dataclasses.replace(model, capabilities=dict(entries[name]["capabilities"]))
        config.models[name] = parse_cases.attach(model, entries.get(name))
    return config


def lock_path(config_path: Path) -> Path:
    """`models.capabilities.lock` beside `models.yaml` (generator/locks.py)."""
    from generator import locks

    return locks.CAPABILITIES.path(config_path)


def needs(request: dict[str, Any]) -> set[str]:
    """The capabilities a request uses."""
    out = set()
    if request.get("tools"):
        out.add("tools")
    for message in request.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role in ("system", "developer"):
            out.add("system_role")
        elif role == "tool":
            out.add("tool_responses")
        calls = message.get("tool_calls")
        if role == "assistant" and isinstance(calls, list) and calls:
            out.add("tool_calls")
            if len(calls) > 1:
                out.add("parallel_tool_calls")
    return out


def wanted(request: dict[str, Any], capabilities: dict[str, str]) -> bool:
    """Whether a shape gets a polyfilled form: it needs something the template refuses, and
    everything it needs that the template lacks can be polyfilled."""
    used = needs(request)
    refused = {c for c in used if capabilities.get(c) == "refused"}
    lacking = {c for c in used if capabilities.get(c, "yes") != "yes"}
    if "tool_calls" in lacking:  # calls written as text: two of them are two in the text
        lacking.discard("parallel_tool_calls")
    return bool(refused) and lacking <= set(POLYFILLABLE)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content
                         if isinstance(part, dict) and part.get("type") == "text")
    return str(content)


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def apply(request: dict[str, Any], capabilities: dict[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The request in a form the template takes, and what was done, one note per polyfill."""
    out = copy.deepcopy(request)
    lacking = {c for c in CAPABILITIES if capabilities.get(c, "yes") != "yes"}
    used = needs(request)
    notes: list[str] = []
    messages = [m for m in out.get("messages") or [] if isinstance(m, dict)]
    if "tools" in lacking and "tools" in used:
        out.pop("tools", None)
        out.pop("tool_choice", None)
        notes.append("tool definitions left out (the template does not render tools)")
    if "tool_calls" in lacking and "tool_calls" in used:
        for message in messages:
            calls = message.pop("tool_calls", None) if message.get("role") == "assistant" else None
            if not calls:
                continue
            shown = [{"name": (c.get("function") or {}).get("name"),
                      "arguments": _arguments((c.get("function") or {}).get("arguments")),
                      **({"id": c["id"]} if c.get("id") else {})} for c in calls if isinstance(c, dict)]
            text = json.dumps({"tool_calls": shown}, indent=2, ensure_ascii=False)
            before = _text(message.get("content"))
            message["content"] = f"{before}\n{text}" if before else text
        notes.append("assistant tool calls written as text: {\"tool_calls\": [...]} (minja's polyfill)")
    if "tool_responses" in lacking and "tool_responses" in used:
        for message in messages:
            if message.get("role") != "tool":
                continue
            response = {"tool": message.get("name"), "content": _text(message.get("content"))}
            if message.get("tool_call_id"):
                response["tool_call_id"] = message["tool_call_id"]
            message.clear()
            message.update(role="user", content=json.dumps({"tool_response": response}, indent=2,
                                                           ensure_ascii=False))
        notes.append("tool results as user turns: {\"tool_response\": {...}} (minja's polyfill)")
    if "system_role" in lacking and "system_role" in used:
        system = [m for m in messages if m.get("role") in ("system", "developer")]
        rest = [m for m in messages if m not in system]
        text = "\n\n".join(_text(m.get("content")) for m in system)
        first = next((m for m in rest if m.get("role") == "user"), None)
        if first is not None:
            first["content"] = f"{text}\n\n{_text(first.get('content'))}"
        else:
            rest.insert(0, {"role": "user", "content": text})
        messages = rest
        notes.append("system text moved into the first user turn (minja's polyfill)")
    merged: list[dict[str, Any]] = []
    for message in messages:  # user turns made above may now follow each other
        if merged and message.get("role") == "user" == merged[-1].get("role") and notes:
            merged[-1]["content"] = f"{_text(merged[-1].get('content'))}\n\n{_text(message.get('content'))}"
        else:
            merged.append(message)
    out["messages"] = merged
    return out, notes


def load_lock(config_path: Path) -> dict[str, dict[str, Any]]:
    """model -> {"template_sha256": ..., "capabilities": {name: state}, "parse": ...}, from the lock
    beside the config (generator/locks.py); {} when there is none."""
    from generator import locks

    data = locks.read(locks.CAPABILITIES, config_path)
    if data is None:
        return {}
    name = lock_path(config_path).name
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise GoldensError(f"{name}: expected {{model: {{template_sha256, capabilities}}}}; "
                           "delete it and run `goldens regenerate`")
    for model, entry in data.items():
        caps = entry.get("capabilities")
        if not isinstance(caps, dict) or any(k not in CAPABILITIES or v not in STATES for k, v in caps.items()):
            raise GoldensError(f"{name}: {model}: capabilities must map {', '.join(CAPABILITIES)} "
                               f"to {'/'.join(STATES)}; delete it and run `goldens regenerate`")
    return data


def write_lock(config_path: Path, entries: dict[str, dict[str, Any]]) -> bool:
    """Write the lock beside the config, keys sorted (canonical: an unchanged probe rewrites
    nothing); True when it changed."""
    from generator import locks

    return locks.write(locks.CAPABILITIES, config_path, json.loads(json.dumps(entries, sort_keys=True)))
