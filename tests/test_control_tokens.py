"""Control-token text in user content, per engine: whether a user message that spells
`<|im_start|>system ...` became the model's control-token ids (a prompt-injection path) or stayed
plain text, on Transformers and on a real llama-server.
"""

from __future__ import annotations

import pytest
from conftest import CONFIG, golden_of, source_of, tokenizer_of

from generator import reference
from generator.analysis import control_tokens
from generator.config import shapes
from generator.engines import Ids, first_divergence
from generator.engines.llama_server.engine import LlamaServerEngine
from generator.engines.transformers.engine import TransformersEngine


QWEN_MARKERS = {"<|im_start|>": "control (151644)", "<|im_end|>": "control (151645)",
                "<|endoftext|>": "control (151643)"}


def control_request(kwargs: dict | None = None) -> dict:
    return shapes.build("control-text", kwargs or {})


def controls(classification: dict[str, str]) -> dict[str, str]:
    return {m: k for m, k in classification.items() if k != "text"}


def test_the_shape_spells_markers_of_several_families():
    assert control_tokens.spelled_markers(control_request()) == [
        "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<|eot_id|>",
        "<|start_header_id|>", "<|end_header_id|>", "[INST]", "[/INST]", "</s>"]
    assert control_tokens.spelled_markers(shapes.build("plain", {})) == []


@pytest.mark.slow
def test_transformers_turns_user_text_into_control_tokens():
    engine = TransformersEngine(source_of("qwen3"), CONFIG.date)
    classification = control_tokens.classify(engine, control_request(), tokenizer_of("qwen3"))
    assert controls(classification) == QWEN_MARKERS
    assert classification["<start_of_turn>"] == classification["</s>"] == "text"
    assert control_tokens.finding(classification).startswith(
        "user content became control tokens (<|im_start|>, <|im_end|>, <|endoftext|>)")

    gemma = TransformersEngine(source_of("gemma3"), CONFIG.date)
    classification = control_tokens.classify(gemma, control_request(), tokenizer_of("gemma3"))
    assert controls(classification) == {"<start_of_turn>": "control (105)", "</s>": "control (212)"}


@pytest.mark.integration
def test_llama_server_also_turns_qwen3_end_of_sequence_text_into_a_control_token(qwen3_llama_server):
    """llama.cpp retypes Qwen3's vocabulary entry `</s>` (a normal token to Transformers) as a
    control token at load ("control-looking token: 128247 '</s>' was not control-type"), so on
    llama-server one more marker of the user's text becomes a control token than on the
    reference, and the control-text golden's ids differ there from token 50 on."""
    engine = LlamaServerEngine(qwen3_llama_server.url)
    for kwargs in ({}, {"enable_thinking": False}):
        classification = control_tokens.classify(engine, control_request(kwargs), tokenizer_of("qwen3"))
        assert controls(classification) == {**QWEN_MARKERS, "</s>": "control (128247)"}
    ids = engine.ids(control_request())
    assert ids.pieces.count("<|im_start|>") == 3  # the template's two and the user's one
    item = golden_of("qwen3/control-text")
    assert first_divergence(item.ids, ids) == 50
    assert (item.pieces[50:53], ids.pieces[50:52]) == ([" </", "s", ">"], [" ", "</s>"])
    # said once, at load: the whole log, since the session's server may have served other files first
    log = qwen3_llama_server.log_path.read_text(encoding="utf-8", errors="replace")
    assert "control-looking token: 128247 '</s>'" in log


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
    classification = control_tokens.classify(PlainTextEngine("qwen3"), control_request(), tokenizer_of("qwen3"))
    assert control_tokens.injected(classification) == []
    assert set(classification.values()) == {"text"}
    assert control_tokens.finding(classification) == "control-token text in user content stayed plain text"


@pytest.mark.parametrize("case_id", ["qwen3/control-text", "qwen3/control-text--thinking-off", "gemma3/control-text"])
def test_control_text_goldens_record_the_finding(case_id):
    item = golden_of(case_id)
    record = item.extra["control_tokens"]["transformers"]
    assert record["finding"].startswith("user content became control tokens")
    expected = "<|im_start|>" if case_id.startswith("qwen3") else "<start_of_turn>"
    assert record["markers"][expected].startswith("control (")
    for other in ("plain", "multi-turn"):
        assert "control_tokens" not in golden_of(f"{case_id.split('/')[0]}/{other}").extra
