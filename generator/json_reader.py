"""The hardened JSON reader every stage uses for JSON from outside: a request, a conversation,
a golden, a ledger entry, an engine's reply. Parsed so that nothing in it can crash a later stage."""

from __future__ import annotations

import json
import re
from typing import Any

from generator.errors import GoldensError

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
    data = _utf8(data, where, error)
    # text that encodes as UTF-8 holds no surrogate, and without a \uD8xx-\uDFxx escape no string
    # parsed from it can: then the C parser and a walk of the containers alone judge it (a
    # tokenizer.json: 0.8 s, not 1.6 s); whatever they doubt takes the full path, which says why
    if "\\ud" not in data and "\\uD" not in data and _encodes(data):
        try:
            value = json.loads(data, parse_constant=_constant)
        except (ValueError, RecursionError):
            pass
        else:
            if _fits(value):
                return value
    try:
        value = json.loads(data, parse_int=_integer, parse_constant=_constant)
    except json.JSONDecodeError as bad:
        raise error(_not_json(where, bad)) from None
    except _BadNumber as bad:
        raise error(f"{where}: not valid JSON ({bad})") from None
    except RecursionError:
        raise error(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    _check_tree(value, where, error)
    return value


def parses(data: bytes, where: str, error: type[Exception] = GoldensError) -> None:
    """That `data` is UTF-8 JSON, said in load_json's words, for a file another library reads
    itself (a tokenizer.json: the tokenizers library parses it again and guards its own values).
    The C parser alone: half of load_json's cost on a 11 MB vocabulary."""
    text = _utf8(data, where, error)
    try:
        json.loads(text)
    except json.JSONDecodeError as bad:
        raise error(_not_json(where, bad)) from None
    except RecursionError:
        raise error(f"{where}: nested deeper than the JSON parser can follow") from None


def _utf8(data: str | bytes, where: str, error: type[Exception]) -> str:
    """The text of `data`; bytes that are not UTF-8 are one line naming the first bad byte."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as bad:
        raise error(f"{where}: not UTF-8 (byte 0x{data[bad.start]:02x} at offset {bad.start})") from None


def _not_json(where: str, bad: json.JSONDecodeError) -> str:
    return f"{where}: not valid JSON (line {bad.lineno}: {bad.msg})"


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


_INT_BOUND = 10 ** MAX_DIGITS  # an integer of more than MAX_DIGITS digits is at least this


def _fits(value: Any) -> bool:
    """No container deeper than _check_tree allows and no integer longer than _integer allows,
    walked one level at a time without looking into strings."""
    level, depth = [value], 0
    while level:
        below = []
        for item in level:
            kind = type(item)
            if kind is dict or kind is list:
                if depth >= MAX_DEPTH:
                    return False
                below.extend(item.values() if kind is dict else item)
            elif kind is int and not -_INT_BOUND < item < _INT_BOUND:
                return False
        level, depth = below, depth + 1
    return True


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
