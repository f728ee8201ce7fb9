"""User-supplied chat requests: an OpenAI-style body, checked before any engine sees it."""

from __future__ import annotations

import json
import re
from typing import Any

from generator.errors import GoldensError

ROLES = {"system", "developer", "user", "assistant", "tool"}
KEYS = {"model", "messages", "tools", "chat_template_kwargs", "documents",
        "add_generation_prompt", "continue_final_message"}
# Names a chat-template kwarg cannot take: the request's own fields, which the template already
# receives from the request, and apply_chat_template's parameters. Either would reach the
# reference as a second value for the same argument (a TypeError recorded as the template's
# outcome) while each engine quietly did something else.
RESERVED_KWARGS = frozenset({
    "messages", "tools", "documents", "add_generation_prompt", "continue_final_message",
    "conversation", "chat_template", "tokenize", "sanitize_control_tokens", "padding", "truncation",
    "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs",
})


def check_kwargs(kwargs: dict[str, Any], where: str) -> None:
    """Chat-template kwargs must not collide with a request field or apply_chat_template's own."""
    for name in kwargs:
        if name in RESERVED_KWARGS:
            raise GoldensError(
                f"{where}.{name}: {name!r} is a request field or apply_chat_template parameter, "
                "not a chat-template kwarg"
            )


MAX_DEPTH = 100  # far deeper than any chat body; deep enough to overflow nothing downstream
MAX_DIGITS = 100  # an integer longer than this is not a token id, a count or a tool argument
_SURROGATE = re.compile("[\ud800-\udfff]")


class _BadNumber(ValueError):
    pass


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise _BadNumber(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_DIGITS})")
    return int(text)


def _constant(name: str) -> float:
    raise _BadNumber(f"{name} is not JSON")


def strict_numbers() -> dict[str, Any]:
    """json.loads' hooks that refuse what load_json refuses in numbers (NaN, Infinity, an
    integer over MAX_DIGITS digits), as _BadNumber, a ValueError."""
    return {"parse_int": _integer, "parse_constant": _constant}


def load_json(data: str | bytes, where: str, error: type[Exception] = GoldensError) -> Any:
    """JSON from outside (a request, a conversation, a golden, an engine's reply), parsed so that
    nothing in it can crash a later stage: UTF-8 only, at most MAX_DEPTH levels of nesting, no
    lone surrogate in any string, no integer over MAX_DIGITS digits, no NaN or Infinity. Every
    problem is one line starting with `where`, raised as `error`."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise error(f"{where}: not UTF-8 (byte 0x{data[bad.start]:02x} at offset {bad.start})") from None
    try:
        value = json.loads(data, parse_int=_integer, parse_constant=_constant)
    except json.JSONDecodeError as bad:
        raise error(f"{where}: not valid JSON (line {bad.lineno}: {bad.msg})") from None
    except _BadNumber as bad:
        raise error(f"{where}: not valid JSON ({bad})") from None
    except RecursionError:
        raise error(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    _check_tree(value, where, error)
    return value


def _check_tree(value: Any, where: str, error: type[Exception]) -> None:
    """Depth and strings, walked without recursion (the point is to survive a deep tree)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                raise error(f"{where}: nested deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    if _SURROGATE.search(key):
                        raise error(f"{where}: a key holds a lone surrogate ({_escaped(key)})")
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str) and _SURROGATE.search(item):
            raise error(f"{where}: a string holds a lone surrogate ({_escaped(item)}); text must be valid Unicode")


def _escaped(text: str) -> str:
    match = _SURROGATE.search(text)
    lo = max(0, match.start() - 10)
    return json.dumps(text[lo:match.start() + 10])


def read_body(value: str) -> tuple[bytes, str]:
    """The bytes of a body file named on the command line (`-`: stdin) and the name to show:
    a regular file of bounded size (files.read_bytes), stdin read up to the same bound."""
    import sys

    from generator import files

    if value == "-":
        data = sys.stdin.buffer.read(files.MAX_READ + 1)
        if len(data) > files.MAX_READ:
            raise GoldensError(f"<stdin>: more than the {files.MAX_READ} bytes a file here may hold")
        return data, "<stdin>"
    return files.read_bytes(value), value


def parse_request(text: str | bytes, where: str) -> dict[str, Any]:
    return validate_request(load_json(text, where), where)


def validate_request(body: Any, where: str) -> dict[str, Any]:
    """Check a chat body; unknown top-level keys of a chat body (temperature, ...) are dropped."""
    if not isinstance(body, dict):
        raise GoldensError(f"{where}: expected a JSON object with `messages`")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise GoldensError(f"{where}: `messages` must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise GoldensError(f"{where}: messages[{i}]: needs a role ({', '.join(sorted(ROLES))})")
    if "tools" in body and not (isinstance(body["tools"], list) and all(isinstance(t, dict) for t in body["tools"])):
        raise GoldensError(f"{where}: `tools` must be a list of tool objects")
    kwargs = body.get("chat_template_kwargs", {})
    if not isinstance(kwargs, dict):
        raise GoldensError(f"{where}: `chat_template_kwargs` must be an object")
    check_kwargs(kwargs, f"{where}: chat_template_kwargs")
    # the body's own key order (a set's order changes from one process to the next)
    request = {key: value for key, value in body.items() if key in KEYS and key != "model"}
    request.setdefault("add_generation_prompt", True)
    request.setdefault("continue_final_message", False)
    request["chat_template_kwargs"] = dict(kwargs)
    return request


# OpenAI content parts that carry media data (the bare {"type": "image"} placeholder carries none).
MEDIA_PARTS = ("image_url", "input_audio", "video_url")


def media_kind(request: dict[str, Any]) -> str | None:
    """The first media part's kind as prose (`an image`, `audio`, `a video`), None when there is none."""
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in MEDIA_PARTS:
                return "audio" if "audio" in kind else "a video" if "video" in kind else "an image"
    return None


def carries_media(request: dict[str, Any]) -> bool:
    """True when a message holds media data: such a request is judged in the expanded view (the
    ids the model's forward pass gets, placeholders expanded), not the template view."""
    for message in request.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") in MEDIA_PARTS for part in content
        ):
            return True
    return False
