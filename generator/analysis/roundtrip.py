"""Round trip: does `encode(decode(ids))` give back a golden's ids?

A client (or a server's chat history) that stores the decoded text and tokenizes it again on the
next request sends the model the round-tripped ids, not the ones it was sent before; where they
part, the prefix cache misses and the model sees a prompt it was never rendered. Two ways are
recorded per golden:

  defaults        tokenizer.encode(tokenizer.decode(ids)), every argument at its default, the
                  way a client writes it (for a tokenizer that adds <bos>, one more <bos>)
  special_parsed  decoded with special tokens kept, encoded with special-token text parsed as
                  special tokens and nothing added: how the reference tokenizes a prompt
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from generator import reference
from generator.engines import first_divergence

CONTEXT = 5
SHARED = 3


def round_trips(tokenizer, ids: Sequence[int]) -> dict[str, list[int]]:
    """The ids after decode and encode, each way."""
    ids = list(ids)
    defaults = tokenizer.encode(tokenizer.decode(ids))
    text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    parsed = tokenizer(text, add_special_tokens=False, split_special_tokens=False)["input_ids"]
    return {"defaults": list(defaults), "special_parsed": list(parsed)}


def record(tokenizer, ids: Sequence[int]) -> dict[str, Any]:
    """The golden form: "same", or where the round trip first differs with the tokens around it."""
    ids = list(ids)
    out: dict[str, Any] = {}
    golden_pieces: list[str] | None = None
    for way, again in round_trips(tokenizer, ids).items():
        at = first_divergence(ids, again)
        if at is None:
            out[way] = "same"
            continue
        if golden_pieces is None:
            golden_pieces = reference.pieces(tokenizer, ids)
        again_pieces = reference.pieces(tokenizer, again[at:at + CONTEXT])
        out[way] = {
            "at": at,
            "tokens": f"{len(ids)} -> {len(again)}",
            "shared": "".join(golden_pieces[max(0, at - SHARED):at]),
            "golden": "".join(golden_pieces[at:at + CONTEXT]),
            "round_trip": "".join(again_pieces),
        }
    return out


def summarize(records: dict[str, dict[str, Any]]) -> list[str]:
    """One line per golden whose round trip is not the identity: which models and shapes."""
    lines = []
    for case, record in sorted(records.items()):
        for way, value in sorted(record.items()):
            if value != "same":
                lines.append(f"{case}: {way} differs at token {value['at']} ({value['tokens']} tokens): "
                             f"{value['golden']!r} became {value['round_trip']!r}")
    return lines
