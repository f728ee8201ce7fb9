"""encode(decode(ids)) per golden, and control-token text in user content, per engine.

Round trip: which models and shapes get different ids back when a client keeps text instead of
ids. Control text: whether a user message that spells `<|im_start|>system ...` became the
model's control-token ids (a prompt-injection path) or stayed plain text, on Transformers and
on a real llama-server.
"""

from __future__ import annotations

import pytest
from conftest import CONFIG, GOLDENS, source_of

from generator import reference
from generator.analysis import roundtrip
from generator.config import shapes
from generator.config.cases import TEMPLATE_VIEW, matrix
from generator.engines import Ids
from generator.engines.llama_server import LlamaServerEngine
from generator.engines.transformers import TransformersEngine
from generator.goldens import golden_file
from generator.replay import divergence
from generator.servers.llama_cpp import LlamaServer
from generator.servers.tiny_gguf import tiny_gguf

CASES = [c for c in matrix(CONFIG) if c.view == TEMPLATE_VIEW]  # expanded goldens record no analyses


def tokenizer_of(model: str):
    return reference.load_tokenizer(source_of(model).tokenizer_dir)


def golden(case_id: str) -> golden_file.Golden:
    return golden_file.read(golden_file.golden_path(GOLDENS, case_id))


@pytest.fixture(scope="module")
def qwen_server():
    """One real llama-server for this module: a tiny GGUF with Qwen3's tokenizer and template."""
    source = source_of("qwen3")
    with LlamaServer(tiny_gguf("qwen3", source.tokenizer_dir, source.template)) as server:
        yield server


# ------------------------------------------------------------------------------ round trip


def test_gemma3_defaults_add_a_second_bos():
    item = golden("gemma3/plain")
    again = roundtrip.round_trips(tokenizer_of("gemma3"), item.ids)
    assert item.ids[:2] == [2, 105]
    assert again["defaults"][:3] == [2, 2, 105] and len(again["defaults"]) == len(item.ids) + 1
    assert again["special_parsed"] == item.ids
    record = roundtrip.roundtrip_record(tokenizer_of("gemma3"), item.ids)
    assert record["special_parsed"] == "same"
    assert record["defaults"] == {
        "at": 1, "tokens": "22 -> 23", "shared": "<bos>",
        "golden": "<start_of_turn>user\nYou are", "round_trip": "<bos><start_of_turn>user\nYou",
    }


def test_qwen3_round_trips_exactly_even_with_control_text():
    item = golden("qwen3/control-text")
    assert roundtrip.roundtrip_record(tokenizer_of("qwen3"), item.ids) == {"defaults": "same", "special_parsed": "same"}


def test_a_divergent_round_trip_reports_where_it_first_differs():
    """Ids no tokenizer would produce for their text: ' are' split in two ('Ġa' 're')."""
    tokenizer = tokenizer_of("qwen3")
    ids = tokenizer.encode("You are terse.")
    split = [ids[0], *tokenizer.convert_tokens_to_ids(["Ġa", "re"]), *ids[2:]]
    assert tokenizer.decode(split) == "You are terse."
    record = roundtrip.roundtrip_record(tokenizer, split)
    for way in ("defaults", "special_parsed"):
        assert record[way] == {"at": 1, "tokens": "5 -> 4", "shared": "You", "golden": " are terse.",
                               "round_trip": " are terse."}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_golden_records_its_round_trip(case):
    item = golden(case.id)
    if item.outcome == "error":
        assert "roundtrip" not in item.extra
        return
    assert item.extra["roundtrip"] == roundtrip.roundtrip_record(tokenizer_of(case.model), item.ids)


def test_affected_models_and_shapes():
    """Who is affected: exactly the goldens that start with the BOS their template wrote, of a
    tokenizer that adds BOS itself by default (gemma3, llama3, mistral-nemo, command-r); each
    differs at token 1 by that second BOS, and nothing differs once special tokens are parsed."""
    records, expected = {}, set()
    for case in CASES:
        item = golden(case.id)
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
    assert "gemma3/plain: defaults differs at token 1 (22 -> 23 tokens): " in "\n".join(lines)


# ------------------------------------------------------------------------------ control-token text


QWEN_MARKERS = {"<|im_start|>": "control (151644)", "<|im_end|>": "control (151645)",
                "<|endoftext|>": "control (151643)"}


def control_request(kwargs: dict | None = None) -> dict:
    return shapes.build("control-text", kwargs or {})


def controls(classification: dict[str, str]) -> dict[str, str]:
    return {m: k for m, k in classification.items() if k != "text"}


def test_the_shape_spells_markers_of_several_families():
    assert roundtrip.spelled_markers(control_request()) == [
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<|eot_id|>",
        "<|start_header_id|>", "<|end_header_id|>", "[INST]", "[/INST]", "</s>"]
    assert roundtrip.spelled_markers(shapes.build("plain", {})) == []


def test_transformers_turns_user_text_into_control_tokens():
    engine = TransformersEngine(source_of("qwen3"), CONFIG.date)
    classification = roundtrip.classify(engine, control_request(), tokenizer_of("qwen3"))
    assert controls(classification) == QWEN_MARKERS
    assert classification["<start_of_turn>"] == classification["</s>"] == "text"
    assert roundtrip.finding(classification).startswith(
        "user content became control tokens (<|im_start|>, <|im_end|>, <|endoftext|>)")

    gemma = TransformersEngine(source_of("gemma3"), CONFIG.date)
    classification = roundtrip.classify(gemma, control_request(), tokenizer_of("gemma3"))
    assert controls(classification) == {"<start_of_turn>": "control (105)", "</s>": "control (212)"}


def test_llama_server_also_turns_qwen3_end_of_sequence_text_into_a_control_token(qwen_server):
    """llama.cpp retypes Qwen3's vocabulary entry `</s>` (a normal token to Transformers) as a
    control token at load ("control-looking token: 128247 '</s>' was not control-type"), so on
    llama-server one more marker of the user's text becomes a control token than on the
    reference, and the control-text golden's ids differ there from token 50 on."""
    engine = LlamaServerEngine(qwen_server.url)
    for kwargs in ({}, {"enable_thinking": False}):
        classification = roundtrip.classify(engine, control_request(kwargs), tokenizer_of("qwen3"))
        assert controls(classification) == {**QWEN_MARKERS, "</s>": "control (128247)"}
    ids = engine.ids(control_request())
    assert ids.pieces.count("<|im_start|>") == 3  # the template's two and the user's one
    item = golden("qwen3/control-text")
    assert divergence.first_divergence(item.ids, ids) == 50
    assert (item.pieces[50:53], ids.pieces[50:52]) == ([" </", "s", ">"], [" ", "</s>"])
    assert "control-looking token: 128247 '</s>'" in qwen_server.log_tail(200)


class PlainTextEngine:
    """A real alternative tokenization, not a mock: the reference's prompt encoded with
    special-token text split into ordinary pieces, as a server with parse_special off would."""

    name = "plain-text"

    def __init__(self, model: str):
        self.source = source_of(model)
        self.tokenizer = tokenizer_of(model)

    def ids(self, request):
        prompt = reference.render_prompt(self.tokenizer, self.source.template, request, CONFIG.date)
        return Ids(self.tokenizer(prompt, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def test_an_engine_that_keeps_marker_text_plain_is_no_finding():
    classification = roundtrip.classify(PlainTextEngine("qwen3"), control_request(), tokenizer_of("qwen3"))
    assert roundtrip.injected(classification) == []
    assert set(classification.values()) == {"text"}
    assert roundtrip.finding(classification) == "control-token text in user content stayed plain text"


@pytest.mark.parametrize("case_id", ["qwen3/control-text", "qwen3/control-text--thinking-off", "gemma3/control-text"])
def test_control_text_goldens_record_the_finding(case_id):
    item = golden(case_id)
    record = item.extra["control_tokens"]["transformers"]
    assert record["finding"].startswith("user content became control tokens")
    expected = "<|im_start|>" if case_id.startswith("qwen3") else "<start_of_turn>"
    assert record["markers"][expected].startswith("control (")
    for other in ("plain", "multi-turn"):
        assert "control_tokens" not in golden(f"{case_id.split('/')[0]}/{other}").extra
