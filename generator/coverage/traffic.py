"""A team's logged traffic as shapes: the smallest set of logged chat bodies that reaches
everything the whole log reaches.

What a body reaches is its features: the compiled template lines it executes for every model
that will render it (under every kwargs variant of that model's matrix), plus structural
features no template line may show (the role sequence, tool use, each role's content forms, the
template kwargs it sets, the generation flags). A greedy cover over those features keeps the
body adding the most new ones, earliest in the log on a tie, so duplicates never survive. A
malformed line is reported with its line number and skipped; the rest is still read."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import canonical
from generator.config.request import validate_request
from generator.coverage.search import greedy, request_bytes
from generator.coverage.trace import Coverage, compiled, render_traced
from generator.errors import GoldensError
from generator.json_reader import load_json


@dataclass
class Body:
    name: str  # where it came from: "<file stem>-<line>" or the file's stem
    body: dict[str, Any]
    features: set = field(default_factory=set)


def read_log(path: Path) -> tuple[list[Body], list[str]]:
    """Bodies from a JSONL file (one body per line, blank lines skipped) or a folder of JSON
    files (sorted by name), and one error line per malformed entry."""
    bodies, errors = [], []
    if path.is_dir():
        entries = [(p.stem, p, p.read_bytes()) for p in sorted(path.glob("*.json"))]
    else:
        try:
            raw = path.read_bytes()
        except OSError as error:
            raise GoldensError(f"{path}: cannot read ({error.strerror})") from None
        entries = [(f"{path.stem}-{n:04d}", f"{path}:{n}", line)
                   for n, line in enumerate(raw.split(b"\n"), 1) if line.strip()]
    for name, where, data in entries:
        try:
            body = load_json(data, str(where))
            validate_request(body, str(where))
        except GoldensError as error:
            errors.append(str(error))
            continue
        bodies.append(Body(name=_safe(name), body=body))
    return bodies, errors


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "body"


def _form(content: Any) -> str:
    if content is None:
        return "null"
    if isinstance(content, str):
        return "empty" if content == "" else "string"
    if isinstance(content, list):
        return "parts:" + ",".join(sorted({str(p.get("type")) if isinstance(p, dict) else "?" for p in content}))
    return type(content).__name__


def structure(body: dict[str, Any]) -> set:
    """Structural features: what a body is made of, beyond the template lines it runs."""
    messages = body.get("messages") or []
    roles = tuple(m.get("role") for m in messages)
    features = {("roles", roles), ("last", roles[-1] if roles else None),
                ("generation", bool(body.get("add_generation_prompt", True)),
                 bool(body.get("continue_final_message", False))),
                ("tools", bool(body.get("tools"))), ("documents", bool(body.get("documents")))}
    for message in messages:
        role = message.get("role")
        features.add(("content", role, _form(message.get("content"))))
        calls = message.get("tool_calls") or []
        if calls:
            features.add(("tool_calls", min(len(calls), 3)))
            for call in calls:
                arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                features.add(("arguments", type(arguments).__name__))
        for key in sorted(set(message) - {"role", "content", "tool_calls"}):
            features.add(("field", role, key))
    for key, value in sorted((body.get("chat_template_kwargs") or {}).items()):
        features.add(("kwarg", key, canonical.dumps(value)))
    return features


def features_of(body: Body, renderers: list[tuple[Any, Any]], config) -> None:
    request = validate_request(json.loads(json.dumps(body.body)), body.name)
    body.features = structure(request)
    for model, source in renderers:
        for kwargs in model.variants.values():
            rendered = dict(request, chat_template_kwargs={**request["chat_template_kwargs"], **model.kwargs, **kwargs})
            body.features |= {("line", model.name, line) for line in render_traced(source, rendered, config.date)[1]}


def minimal(bodies: list[Body]) -> list[Body]:
    kept = [body for body, _ in greedy(set(), bodies, covers=lambda body: body.features)]
    return sorted(kept, key=bodies.index)


_TAG = re.compile(r"(</?[A-Za-z_|][A-Za-z0-9_|]{0,40}>)")


def redact_text(text: str) -> str:
    """Letters become x (X), digits 0, everything else (spacing, punctuation, markup tags
    such as <think>) stays: placeholder text of the same form and length."""
    return "".join(part if _TAG.fullmatch(part) else
                   re.sub(r"[0-9]", "0", re.sub(r"[A-Z]", "X", re.sub(r"[^\W\d_A-Z]", "x", part)))
                   for part in _TAG.split(text))


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [_redact_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    return value


def redact(body: dict[str, Any]) -> dict[str, Any]:
    """Message text replaced (content, text parts, reasoning, tool-call argument values as
    object or JSON string); roles, names, ids, tools and everything structural kept."""
    out = dict(body)
    messages = []
    for message in body.get("messages") or []:
        message = dict(message)
        for key in ("content", "reasoning_content", "reasoning", "thinking"):
            if isinstance(message.get(key), str):
                message[key] = redact_text(message[key])
        if isinstance(message.get("content"), list):
            message["content"] = [
                {**p, "text": redact_text(p["text"])} if isinstance(p, dict) and isinstance(p.get("text"), str) else p
                for p in message["content"]]
        calls = []
        for call in message.get("tool_calls") or []:
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    function["arguments"] = json.dumps(_redact_value(json.loads(arguments)), ensure_ascii=False)
                except ValueError:
                    function["arguments"] = redact_text(arguments)
            elif arguments is not None:
                function["arguments"] = _redact_value(arguments)
            calls.append({**call, "function": function})
        if "tool_calls" in message:
            message["tool_calls"] = calls if message["tool_calls"] is not None else None
        messages.append(message)
    out["messages"] = messages
    return out


@dataclass
class Imported:
    read: int
    kept: list[Body]
    errors: list[str]
    coverage: dict[str, Coverage]  # per model, of the kept set (the whole log's, by construction)


def import_log(path: Path, out: Path, config, models: list, redacting: bool = False) -> Imported:
    from generator import files
    from generator.sources.source import resolve

    bodies, errors = read_log(path)
    renderers = [(model, resolve(model, config)) for model in models]
    for body in bodies:
        features_of(body, renderers, config)
    kept = minimal(bodies)
    coverage = {}
    for model, source in renderers:
        coverage[model.name] = Coverage(compiled(source.template), {
            f[2] for b in kept for f in b.features if f[0] == "line" and f[1] == model.name})
    if kept:
        out.mkdir(parents=True, exist_ok=True)
    for body in kept:
        data = redact(body.body) if redacting else body.body
        files.atomic_write(out / f"{body.name}.json", request_bytes(data))
    return Imported(read=len(bodies) + len(errors), kept=kept, errors=errors, coverage=coverage)
