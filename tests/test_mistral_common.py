"""mistral-common (vLLM's path for Mistral models) against the Jinja reference, on Mistral NeMo.

The reference is models.yaml's mistral-nemo: the tokenizer directory sources/tekken.py builds
from mistral-common's tekken_240718.json, plus llama.cpp's copy of the NeMo chat template,
through Transformers; the engine encodes with the same tekken file. Requests are rendered here
rather than read from the goldens because several are variants no golden holds (OpenAI-style
tool-call ids). Plain and tool requests must agree token for token; where the template and
Mistral's encoder lay a conversation out differently (tool results, prefill, control-token
text) the divergence must be found at its first token. (Replaying the committed goldens through
mistral-common is test_replay_engines.py's job.)
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json

import pytest
from conftest import CONFIG, source_of

from generator import reference
from generator.config import shapes
from generator.engines import EngineError, Refused
from generator.engines.mistral_common.engine import MistralCommonEngine
from generator.goldens import golden_file
from generator.replay.judging.divergence import diverge
from generator.replay.judging.judge import judge
from generator.sources import tekken

IDS = {shapes.CALL_1: "call_1", shapes.CALL_2: "call_2"}  # OpenAI-style ids NeMo rejects


@functools.lru_cache(maxsize=None)
def engine() -> MistralCommonEngine:
    return MistralCommonEngine(source_of("mistral-nemo"))


def render(request: dict) -> reference.Rendered:
    source = source_of("mistral-nemo")
    return reference.render(reference.load_tokenizer(source.tokenizer_dir), source.template, request, CONFIG.date)


def openai_ids(request: dict) -> dict:
    request = copy.deepcopy(request)
    for message in request["messages"]:
        for call in message.get("tool_calls") or []:
            call["id"] = IDS[call["id"]]
        if "tool_call_id" in message:
            message["tool_call_id"] = IDS[message["tool_call_id"]]
    return request


def divergence(expected: reference.Rendered, actual):
    return diverge(expected.ids, expected.pieces, expected.prompt, actual, actual.pieces, actual.prompt)


@pytest.mark.parametrize("shape", ["plain", "no-system", "multi-turn", "cjk-emoji", "whitespace"])
@pytest.mark.slow
def test_plain_conversations_match_the_template(shape):
    request = shapes.build(shape, {})
    expected, actual = render(request), engine().ids(request)
    assert list(actual) == expected.ids
    assert actual.prompt == expected.prompt


@pytest.mark.parametrize("shape", ["tools-reduced", "tools"])
@pytest.mark.slow
def test_tools_match_the_template(shape):
    """Both write [AVAILABLE_TOOLS] with name/description/parameters only: the template skips the
    `return` key, the engine keeps what vLLM's request model keeps.

    Finding: mistral-common's Tool carries `strict` (default false) and model_dump() writes it, so
    a dump of the tools has `"strict": false` after `parameters` inside each function, which the
    NeMo template never writes. mistral-common 1.13.1's v2/v3 encoder excludes `function.strict`
    from the [AVAILABLE_TOOLS] JSON, so the tokens are equal with nothing to account for; an
    encoder that kept it would part from the template right after each tool's parameters."""
    request = shapes.build(shape, {})
    expected, actual = render(request), engine().ids(request)
    assert list(actual) == expected.ids
    chat = engine().request(request)
    dumped = json.dumps([tool.model_dump() for tool in chat.tools])
    assert '"required": ["city"]}, "strict": false}' in dumped
    assert '"strict"' not in actual.prompt and '"strict"' not in expected.prompt


@pytest.mark.parametrize("shape", ["tool-result", "tool-result-json-args", "parallel-tool-calls"])
def test_openai_style_tool_call_ids_are_refused_by_both(shape):
    """OpenAI-style ids (call_1) are not 9 alphanumerics: NeMo's template raises, mistral-common's
    v3 validator rejects; both refuse the same request."""
    request = openai_ids(shapes.build(shape, {}))
    assert "Tool call IDs should be alphanumeric strings with length 9!" in render(request).error
    with pytest.raises(Refused, match="Tool call id was call_1 but must be a-z, A-Z, 0-9, with a length of 9"):
        engine().ids(request)


@pytest.mark.parametrize("shape", ["tool-result", "tool-result-json-args", "parallel-tool-calls"])
def test_tool_results_diverge_where_the_template_drops_the_system_prompt(shape, tmp_path):
    """NeMo's template prepends the system prompt only to a user message that is the last message;
    after a tool result it is dropped, while mistral-common puts it in the last user turn. Replayed
    as a golden, the drift is found at the first token of that user turn's text."""
    request = shapes.build(shape, {})
    expected = render(request)
    assert expected.error is None
    item = golden_file.Golden(case=f"mistral-nemo/{shape}", request=request, outcome="ok", ids=expected.ids,
                                pieces=expected.pieces, prompt=expected.prompt, error=None, provenance={})
    outcome = judge(engine(), item, tmp_path)
    assert outcome.status == "drift"
    div = outcome.divergence
    assert div.index == 138  # right after <s>[AVAILABLE_TOOLS]...[/AVAILABLE_TOOLS][INST]
    assert expected.pieces[div.index - 1] == "[INST]"
    assert dict((p, piece) for p, _, piece in div.actual)[div.index] == "You"
    assert "[INST]You are terse.\n\n" in div.actual_text and "You are terse." not in expected.prompt

    actual = engine().ids(request)
    # Further on, the tool result itself: the template pastes the content unquoted, mistral-common
    # writes it as a JSON string.
    result = request["messages"][3]["content"]
    assert f'[TOOL_RESULTS]{{"content": {result}, "call_id"' in expected.prompt
    assert f'[TOOL_RESULTS]{{"content": "{result}", "call_id"' in actual.prompt
    if shape == "tool-result-json-args":
        # ... and arguments sent as a JSON string: both write the object (the reference decodes
        # a JSON-string object before the template runs, as vLLM and llama-server do).
        assert '"arguments": {"city": "Paris"}' in expected.prompt
        assert '"arguments": {"city": "Paris"}' in actual.prompt


def test_prefill_drops_the_system_prompt_in_the_template_only():
    """continue_final_message becomes a prefix assistant message; the template again keeps the
    system prompt only when the last message is the user's."""
    request = shapes.build("prefill", {})
    expected, actual = render(request), engine().ids(request)
    div = divergence(expected, actual)
    assert (div.index, expected.pieces[:2], actual.pieces[2]) == (2, ["<s>", "[INST]"], "You")
    assert expected.prompt.endswith("[/INST]The answer is") and actual.prompt.endswith("[/INST]The answer is")


def test_control_token_text_stays_text_in_mistral_common():
    """User text spelling "[INST]" or "</s>": the reference tokenizes the rendered string and turns
    them into control tokens; mistral-common encodes message text as plain text."""
    request = shapes.build("control-text", {})
    expected, actual = render(request), engine().ids(request)
    assert expected.prompt == actual.prompt
    div = divergence(expected, actual)
    assert expected.pieces[div.index + 1] == "[INST]" and actual.pieces[div.index] == " ["
    assert expected.ids.count(3) == 2 and list(actual).count(3) == 1  # [INST] is id 3


@pytest.mark.parametrize("shape, reason", [
    ("documents", "documents cannot be expressed"),
    ("image", "an image part with no image"),
    ("video", "a 'video' part cannot be expressed"),
])
def test_what_mistral_common_cannot_express_is_refused(shape, reason):
    with pytest.raises(Refused, match=reason):
        engine().ids(shapes.build(shape, {}))


def test_the_engine_encodes_with_its_sources_tekken_file(tmp_path):
    """The file the reference's tokenizer directory was built from, not one of its own choosing:
    a source naming another file gets that file read (here an unreadable one), and a source
    built from no tekken file cannot be encoded by mistral-common at all."""
    nemo = source_of("mistral-nemo")
    assert nemo.tekken == tekken.tekken_file("tekken_240718.json")
    inner = engine().tokenizer.instruct_tokenizer.tokenizer
    assert inner.n_words == len(reference.load_tokenizer(nemo.tokenizer_dir)) == 131072
    broken = tmp_path / "tekken_broken.json"
    broken.write_text("{}", encoding="utf-8")
    with pytest.raises(EngineError, match=r"mistral-common: .*tekken_broken.json: cannot load the tekken file"):
        MistralCommonEngine(dataclasses.replace(nemo, tekken=broken))
    with pytest.raises(EngineError, match="mistral-common: qwen3: its tokenizer is not built from a tekken file"):
        MistralCommonEngine(source_of("qwen3"))


# The reference passes a developer message as system (reference.normalize); NeMo's template still
# refuses a system message anywhere but first, which mistral-common renders.
DEVELOPER_MID = {"messages": [{"role": "user", "content": "Hello!"}, {"role": "developer", "content": "Answer in French."},
                              {"role": "user", "content": "How are you?"}]}


def test_a_rendering_where_the_reference_refuses_is_drift_until_reviewed(tmp_path):
    """NeMo's template refuses a mid-conversation developer message; mistral-common renders it.
    Unreviewed that is drift; `record` makes it a ledger entry holding mistral-common's ids, then
    it is known; an entry whose ids the engine no longer gives is drift again (ledger-moved)."""
    from generator.replay.judging.recording import record

    expected = render(DEVELOPER_MID)
    assert expected.error is not None and "Only user and assistant roles" in expected.error
    item = golden_file.Golden(case="mistral-nemo/developer-first", request=DEVELOPER_MID, outcome="error",
                              ids=[], pieces=[], prompt=None, error=expected.error, provenance={})
    (tmp_path / "mistral-nemo").mkdir()
    before = judge(engine(), item, tmp_path)
    assert before.status == "drift" and "the reference refused" in before.detail and "rendered" in before.detail
    path = record(engine(), item, tmp_path, "mistral-common maps developer to the system prompt")
    entry = json.loads(path.read_text(encoding="utf-8"))
    assert entry["outcome"] == "ok" and entry["prompt"] == "<s>[INST]Hello![/INST][INST]Answer in French.\n\nHow are you?[/INST]"
    after = judge(engine(), item, tmp_path)
    assert (after.status, after.reason) == ("known", "mistral-common maps developer to the system prompt")
    edited = golden_file.read(path)
    edited.ids, edited.pieces = edited.ids[:-1], edited.pieces[:-1]  # as if reviewed one token shorter
    path.write_text(golden_file.dumps(edited), encoding="utf-8")
    moved = judge(engine(), item, tmp_path)
    assert (moved.status, moved.kind) == ("drift", "ledger-moved") and "the reference refuses this case" in moved.detail


def test_a_refusal_both_make_is_not_recorded(tmp_path):
    from generator.errors import GoldensError
    from generator.replay.judging.recording import record

    request = openai_ids(shapes.build("tool-result", {}))
    expected = render(request)
    item = golden_file.Golden(case="mistral-nemo/tool-result", request=request, outcome="error",
                              ids=[], pieces=[], prompt=None, error=expected.error, provenance={})
    with pytest.raises(GoldensError, match="refuses it as the reference does; nothing to record"):
        record(engine(), item, tmp_path, "a reason")
