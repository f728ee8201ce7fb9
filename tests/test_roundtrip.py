"""encode(decode(ids)) per golden: which models and shapes get different ids back when a client
keeps text instead of ids. (That every golden's recorded round trip is the one the reference
computes today is test_reference.py's snapshot comparison.)
"""

from __future__ import annotations

import pytest
from conftest import CONFIG, golden_of, token_count, tokenizer_of

from generator.analysis import roundtrip
from generator.config.cases import TEMPLATE_VIEW, matrix

CASES = [c for c in matrix(CONFIG) if c.view == TEMPLATE_VIEW]  # expanded goldens record no analyses


# ------------------------------------------------------------------------------ round trip


def test_gemma3_defaults_add_a_second_bos():
    item = golden_of("gemma3/plain")
    again = roundtrip.round_trips(tokenizer_of("gemma3"), item.ids)
    assert item.ids[:2] == [2, 105]
    assert again["defaults"][:3] == [2, 2, 105] and len(again["defaults"]) == len(item.ids) + 1
    assert again["special_parsed"] == item.ids
    record = roundtrip.record(tokenizer_of("gemma3"), item.ids)
    assert record["special_parsed"] == "same"
    assert record["defaults"] == {
        "at": 1, "tokens": f"{len(item.ids)} -> {len(item.ids) + 1}", "shared": "<bos>",
        "golden": "<start_of_turn>user\nYou are", "round_trip": "<bos><start_of_turn>user\nYou",
    }


def test_qwen3_round_trips_exactly_even_with_control_text():
    item = golden_of("qwen3/control-text")
    assert roundtrip.record(tokenizer_of("qwen3"), item.ids) == {"defaults": "same", "special_parsed": "same"}


def test_a_divergent_round_trip_reports_where_it_first_differs():
    """Ids no tokenizer would produce for their text: ' are' split in two ('Ġa' 're')."""
    tokenizer = tokenizer_of("qwen3")
    ids = tokenizer.encode("You are terse.")
    split = [ids[0], *tokenizer.convert_tokens_to_ids(["Ġa", "re"]), *ids[2:]]
    assert tokenizer.decode(split) == "You are terse."
    record = roundtrip.record(tokenizer, split)
    for way in ("defaults", "special_parsed"):
        assert record[way] == {"at": 1, "tokens": "5 -> 4", "shared": "You", "golden": " are terse.",
                               "round_trip": " are terse."}


@pytest.mark.slow  # every golden of the matrix against its model's tokenizer: all fourteen loaded
def test_affected_models_and_shapes():
    """Who is affected: exactly the goldens that start with the BOS their template wrote, of a
    tokenizer that adds BOS itself by default (gemma3, llama3, mistral-nemo, command-r); each
    differs at token 1 by that second BOS, and nothing differs once special tokens are parsed."""
    records, expected = {}, set()
    for case in CASES:
        item = golden_of(case.id)
        if item.outcome != "ok":
            continue
        records[case.id] = item.extra["roundtrip"]
        tokenizer = tokenizer_of(case.model)
        adds_bos = tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]
        if adds_bos and item.ids[:1] == [tokenizer.bos_token_id]:
            expected.add(case.id)
    lines = roundtrip.summarize(records)
    affected = {line.split(":", 1)[0] for line in lines}
    assert affected == expected
    assert {c.split("/")[0] for c in expected} >= {"gemma3", "llama3"}
    assert all(": defaults differs at token 1 " in line for line in lines)
    n = token_count("gemma3/plain")  # the round trip adds one <bos>
    assert f"gemma3/plain: defaults differs at token 1 ({n} -> {n + 1} tokens): " in "\n".join(lines)
