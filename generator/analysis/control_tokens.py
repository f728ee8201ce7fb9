"""Control-token text in user content: did a user's `<|im_start|>system ...` become control tokens?

A user message that spells a model's own control tokens (`<|im_start|>`, `<start_of_turn>`,
`<|eot_id|>`) is a prompt-injection path when the engine matches the text as special tokens: the
user wrote a turn boundary. Per engine, each marker either became one control token or stayed
plain text pieces. The marker count an engine's template writes itself is measured on the same
request with the content replaced by plain text, so the check needs nothing but the engine's
ids and pieces. Engines differ here: llama.cpp retypes control-looking vocabulary entries such
as Qwen3's `</s>` as control tokens, which the reference tokenizes as text.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from generator import reference
from generator.engines import Engine, Request, pieces_of

# Control-token text of several model families; the ones a user message spells are checked.
MARKERS = (
    "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>",
    "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
    "[INST]", "[/INST]", "<s>", "</s>",
)
PLAIN = "plain words"  # what the content is replaced with to count the template's own markers


def _user_text(request: Request) -> list[tuple[int, str]]:
    """(message index, text) of every user message's text content."""
    out = []
    for index, message in enumerate(request.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            out.append((index, content))
        elif isinstance(content, list):
            out += [(index, part["text"]) for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)]
    return out


def spelled_markers(request: Request) -> list[str]:
    """The known control-token texts a user message of this request spells, in MARKERS order."""
    text = "\n".join(t for _, t in _user_text(request))
    return [m for m in MARKERS if m in text]


def plain_variant(request: Request) -> Request:
    """The same request with every user message's text replaced by plain words."""
    plain = copy.deepcopy(request)
    for message in plain["messages"]:
        if message.get("role") != "user":
            continue
        if isinstance(message.get("content"), str):
            message["content"] = PLAIN
        elif isinstance(message.get("content"), list):
            for part in message["content"]:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    part["text"] = PLAIN
    return plain


def classify(engine: Engine, request: Request, tokenizer) -> dict[str, str]:
    """Per marker the user spelled: "control (<id>)" when every occurrence became one token
    whose piece is the marker text (the engine matched it as a special token), "partly control
    (n of m, <id>)" when some did, "text" when it stayed ordinary pieces. Counted against the
    same request with plain content, so the template's own markers are not counted; pieces
    come from the engine (llama-server's tokenizer may type a token differently from the
    reference's) and from `tokenizer` only when the engine returns none."""
    markers = spelled_markers(request)
    text = "\n".join(t for _, t in _user_text(request))
    actual = _tokens(engine.ids(request), tokenizer)
    baseline = _tokens(engine.ids(plain_variant(request)), tokenizer)
    result = {}
    for marker in markers:
        spelled = text.count(marker)
        ids = [i for i, piece in actual if piece == marker]
        became = len(ids) - sum(1 for _, piece in baseline if piece == marker)
        if became <= 0:
            result[marker] = "text"
        elif became >= spelled:
            result[marker] = f"control ({ids[0]})"
        else:
            result[marker] = f"partly control ({became} of {spelled}, {ids[0]})"
    return result


def _tokens(ids, tokenizer) -> list[tuple[int, str]]:
    return list(zip(ids, pieces_of(ids, functools.partial(reference.pieces, tokenizer))))


def injected(classification: dict[str, str]) -> list[str]:
    """The markers that became control tokens: the finding."""
    return [m for m, kind in classification.items() if kind != "text"]


def finding(classification: dict[str, str]) -> str:
    """One line: which spelled markers became control tokens, or that none did."""
    markers = injected(classification)
    if not markers:
        return "control-token text in user content stayed plain text"
    return (f"user content became control tokens ({', '.join(markers)}): a user can write turn "
            "boundaries (prompt injection)")


def record(engine: Engine, request: Request, tokenizer) -> dict[str, Any]:
    """The golden form for one engine: each marker's fate and the finding in one line."""
    classification = classify(engine, request, tokenizer)
    return {"finding": finding(classification), "markers": classification}
