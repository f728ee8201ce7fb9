"""The hardened JSON reader: what it refuses and why, whichever path judged the text (the C
parser's fast path when the text can hold no surrogate, the hooked parse and full walk else)."""

from __future__ import annotations

import json

import pytest

from generator.errors import GoldensError
from generator.json_reader import MAX_DEPTH, MAX_DIGITS, load_json, parses


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


ACCEPTED = [
    nested(MAX_DEPTH),  # the deepest container is at MAX_DEPTH - 1
    "1" * MAX_DIGITS,
    "-" + "9" * MAX_DIGITS,
    '{"a": [1, 2.5, true, null, "x"], "b": {"c": "\\u00e9\\ud83d\\ude00"}}',  # a surrogate pair is one character
    '["\\\\ud800"]',  # an escaped backslash before "ud800": text, not a surrogate
    '{"k": "caf\u00e9 \u4f60\u597d"}',
]

REFUSED = [
    (nested(MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
    ('{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
    ("1" * (MAX_DIGITS + 1), f"an integer of {MAX_DIGITS + 1} digits (at most {MAX_DIGITS})"),
    ('{"a": [-' + "7" * 5000 + "]}", f"an integer of 5000 digits (at most {MAX_DIGITS})"),
    ("[NaN]", "NaN is not JSON"),
    ('{"x": -Infinity}', "-Infinity is not JSON"),
    ('["\\ud800"]', "a string holds a lone surrogate"),
    ('{"\\uDC00": 1}', "a key holds a lone surrogate"),
    ("[1,]", "not valid JSON (line 1: Expecting value)"),
]


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize("text", ACCEPTED)
def test_what_is_json_reads_as_the_standard_parser_reads_it(text, as_bytes):
    assert load_json(text.encode("utf-8") if as_bytes else text, "t") == json.loads(text)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
@pytest.mark.parametrize(("text", "says"), REFUSED)
def test_what_could_crash_a_later_stage_is_one_line_naming_why(text, says, as_bytes):
    with pytest.raises(GoldensError) as raised:
        load_json(text.encode("utf-8") if as_bytes else text, "where.json")
    message = str(raised.value)
    assert message.startswith("where.json: ") and says in message and "\n" not in message, message


def test_a_raw_lone_surrogate_in_text_is_refused():
    """Only a str can hold one (UTF-8 cannot encode it): the fast path must not take it."""
    with pytest.raises(GoldensError, match="lone surrogate"):
        load_json('["a\ud800b"]', "where.json")


def test_bytes_that_are_not_utf8_say_the_offset():
    with pytest.raises(GoldensError, match=r"not UTF-8 \(byte 0xff at offset 2\)"):
        load_json(b'["\xff"]', "where.json")


@pytest.mark.parametrize("data, needle", [
    (b'{"model": ', "tokenizer.json: not valid JSON (line 1: Expecting value)"),
    (b'{"a": "\xe9"}', "tokenizer.json: not UTF-8 (byte 0xe9 at offset 7)"),
    ('{"a": 1}'.encode("utf-16"), "tokenizer.json: not UTF-8 (byte 0xff at offset 0)"),
])
def test_parses_says_what_load_json_says_of_a_file_another_library_reads(data, needle):
    """A tokenizer.json is checked only for being UTF-8 JSON (the tokenizers library guards the
    rest), in the same words as load_json's refusal."""
    with pytest.raises(GoldensError) as raised:
        parses(data, "tokenizer.json")
    assert str(raised.value) == needle
    with pytest.raises(GoldensError) as full:
        load_json(data, "tokenizer.json")
    assert str(full.value) == needle
    parses(b'{"vocab": {"\\ud83d\\ude00": 1}}', "tokenizer.json")  # what it accepts comes back as nothing
