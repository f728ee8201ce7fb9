"""The reference's output side: a parse case's output ids and the message they should parse to.

The output ids come by round trip: the conversation rendered with the assistant message
(add_generation_prompt false), after the generation prompt's ids (the conversation rendered
with add_generation_prompt true), up to and including the model's end-of-turn token. Where the
generation prompt is not a prefix of that render (Mistral's templates move the system text to
the last user turn; Gemma 4 opens an empty thought channel in the prompt only), the output
starts where the render with the message parts from the render with an empty assistant message,
provided the model would not write again a special token the generation prompt already wrote
(Qwen3 with thinking off closes its think block in the prompt: a reasoning output cannot follow).
A case may give the raw `output` text instead (special tokens written as text): its ids are the
tokenizer's, special tokens parsed. The end token is the first of the model's declared `end`
tokens in the output (cut after it); where the template writes none, the first is appended and
the golden says so.

The expected message is the assistant message as a client should get it back: content,
reasoning, each call's name and arguments as the JSON text the template wrote (the first of the
usual serializations found in the output; else the compact one), and the finish reason.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

from generator import reference
from generator.config import parse_cases


@dataclass
class Output:
    """A parse case as the reference makes it: the output ids, their pieces and text, the
    expected message, how the output was found, or why the case cannot be made."""

    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    text: str = ""
    expected: dict[str, Any] | None = None
    how: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def outcome(self) -> str:
        return "error" if self.error is not None else "ok"


def _content(message: dict[str, Any]) -> str | None:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return content if isinstance(content, str) else None


def _reasoning(message: dict[str, Any]) -> str | None:
    for key in ("reasoning_content", "reasoning", "thinking"):
        if isinstance(message.get(key), str):
            return message[key]
    return None


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def serializations(arguments: Any) -> list[str]:
    """The JSON texts a template may write for an arguments object, most usual first."""
    out = []
    for ascii_ in (False, True):
        for separators in ((", ", ": "), (",", ":")):
            text = json.dumps(arguments, ensure_ascii=ascii_, separators=separators)
            if text not in out:
                out.append(text)
    return out


def expected_message(assistant: dict[str, Any], text: str, finish_reason: str | None) -> dict[str, Any]:
    """What a client should get back for this assistant message, the output being `text`."""
    calls = []
    for call in assistant.get("tool_calls") or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        arguments = _arguments(function.get("arguments", {}))
        if isinstance(arguments, str):
            written = arguments
        else:
            compact = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
            written = next((s for s in serializations(arguments) if s in text), compact)
        calls.append({"name": function.get("name", ""), "arguments": written})
    content = _content(assistant)
    return {"content": content if content else None, "reasoning_content": _reasoning(assistant) or None,
            "tool_calls": calls, "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value] if isinstance(value, str) and value else []


def unwritten(assistant: dict[str, Any], text: str) -> str | None:
    """What of the assistant message the output text does not hold (the template dropped it),
    or None: its content, its reasoning, each call's name and string values (as written or as
    JSON escapes them)."""
    content, reasoning = _content(assistant), _reasoning(assistant)
    if content and content not in text:
        return "its content"
    if reasoning and reasoning not in text:
        return "its reasoning"
    for i, call in enumerate(assistant.get("tool_calls") or []):
        function = call.get("function", call) if isinstance(call, dict) else {}
        name = function.get("name")
        if name and not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text):
            return f"tool call {i}"
        for leaf in _leaves(_arguments(function.get("arguments", {}))):
            if leaf not in text and json.dumps(leaf)[1:-1] not in text and json.dumps(leaf, ensure_ascii=False)[1:-1] not in text:
                return f"tool call {i}'s arguments"
    return None


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def output_of(source, request: dict[str, Any], end: tuple[str, ...], date: _dt.date) -> Output:
    """The reference's output for a parse case (`request` as config/parse_cases.py builds or
    validates one)."""
    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    case = parse_cases.split(request)
    end_ids = []
    for token in end:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is None or token_id == tokenizer.unk_token_id:
            return Output(error=f"the end token {token!r} is not a token of this tokenizer")
        end_ids.append(token_id)
    how: dict[str, Any] = {}
    if case.output is not None:
        ids = list(tokenizer(case.output, add_special_tokens=False)["input_ids"])
        how["from"] = "text"
    else:
        prompt = reference.render(tokenizer, source.template, case.chat, date)
        if prompt.error is not None:
            return Output(error=f"the template refuses the conversation: {prompt.error}")
        history = dict(case.chat, messages=[*case.chat["messages"], case.assistant],
                       add_generation_prompt=False)
        full = reference.render(tokenizer, source.template, history, date)
        if full.error is not None:
            return Output(error=f"the template refuses the assistant message: {full.error}")
        if full.ids[:len(prompt.ids)] == prompt.ids:
            ids = full.ids[len(prompt.ids):]
            how["from"] = "after the generation prompt"
        else:
            empty = reference.render(tokenizer, source.template, dict(
                history, messages=[*case.chat["messages"], {"role": "assistant", "content": ""}]), date)
            if empty.error is not None:
                return Output(error=f"the template refuses an empty assistant message: {empty.error}")
            ids = full.ids[_common(empty.ids, full.ids):]
            opened = prompt.ids[_common(prompt.ids, full.ids):]
            special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
            again = sorted({t for t in opened if t in special} & set(ids))
            if again:
                shown = ", ".join(tokenizer.convert_ids_to_tokens(again))
                return Output(error=f"not written after this generation prompt: it already wrote {shown}, "
                                    "which the output would write again")
            how["from"] = "after the history (the generation prompt is not a prefix of the render)"
        at = next((i for i, token_id in enumerate(ids) if token_id in end_ids), None)
        if at is not None:
            ids = ids[:at + 1]
            how["end"] = "written"
        elif end_ids:
            ids = [*ids, end_ids[0]]
            how["end"] = f"appended ({end[0]}: the template writes no end token after the message)"
        else:
            how["end"] = "none declared (models.yaml parse.end)"
    text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if case.output is None:
        missing = unwritten(case.assistant, text)
        if missing is not None:
            return Output(error=f"the template does not write {missing} in the output")
    expected = expected_message(case.assistant, text, case.finish_reason)
    if case.finish_reason == "length" and case.output is None:
        ids, text, expected = _cut(tokenizer, ids, text, expected)
        how["end"] = "cut half way through the content (finish length)"
    if not ids:
        return Output(error="the output is empty")
    return Output(ids=ids, pieces=reference.pieces(tokenizer, ids), text=text, expected=expected, how=how)


def _cut(tokenizer, ids: list[int], text: str, expected: dict[str, Any]) -> tuple[list[int], str, dict[str, Any]]:
    """The output cut at the first id whose text reaches half way through the content, on a
    whole character; the expected content is what of it the kept ids hold."""
    content = expected["content"] or ""
    start = text.find(content) if content else -1
    if start < 0:
        return ids, text, expected
    target = start + len(content) // 2
    for k in range(1, len(ids)):
        kept = tokenizer.decode(ids[:k], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if len(kept) >= target and not kept.endswith("\ufffd"):
            return ids[:k], kept, dict(expected, content=kept[start:] or None)
    return ids, text, expected
