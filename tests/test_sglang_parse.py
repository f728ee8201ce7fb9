"""SGLang's output side (generator/engines/sglang/engine.py): real parses through the release's own
parsers in their venv, whole and streamed in several chunkings, on output ids the reference
renders (a conversation with and without its assistant message) or the model's tokenizer encodes.

Where SGLang 0.5.23 parts from the message the output encodes, the test says so and names the
SGLang source line: those are findings, checked here so that a release that fixes one shows up.
"""

from __future__ import annotations

import json

import pytest
from conftest import CONFIG, source_of, tier, tokenizer_of

from generator import reference
from generator.config import engine_registry
from generator.engines import parse as parse_api
from generator.engines.sglang.engine import light_requirements
from generator.engines.sglang import worker as sglang_worker

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS, "add_generation_prompt": True}
ASK_TWO = {**ASK, "messages": [{"role": "user", "content": "Weather in Paris and Rome?"}]}
CHAT = {"messages": [{"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True}
END = {"qwen3": ("<|im_end|>",), "gpt-oss": ("<|return|>", "<|call|>")}


def call(city: str) -> dict:
    return {"id": f"call_{city}", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


def round_trip(model: str, request: dict, assistant: dict) -> list[int]:
    """The reference's output ids: the conversation rendered with the assistant message, after
    the generation prompt's ids, up to and including the model's end-of-turn token."""
    source, tokenizer = source_of(model), tokenizer_of(model)
    prompt = reference.render(tokenizer, source.template, request, CONFIG.date)
    full = reference.render(tokenizer, source.template, {**request, "messages": [*request["messages"], assistant],
                                                         "add_generation_prompt": False}, CONFIG.date)
    assert prompt.error is None and full.error is None
    assert full.ids[:len(prompt.ids)] == prompt.ids
    output = full.ids[len(prompt.ids):]
    ends = {tokenizer.convert_tokens_to_ids(token) for token in END[model]}
    return output[:next(i for i, token in enumerate(output) if token in ends) + 1]


def encoded(model: str, text: str) -> list[int]:
    """An output written as text, special tokens parsed, in the model's own tokenizer."""
    return tokenizer_of(model).encode(text, add_special_tokens=False)


def plans(n: int) -> dict[str, list[int]]:
    """One id per chunk, two, three and seven (the last chunk shorter)."""
    def sized(size: int) -> list[int]:
        return [size] * (n // size) + ([n % size] if n % size else [])
    return {"one id": [1] * n, "two ids": sized(2), "three ids": sized(3), "seven ids": sized(7)}


def arguments(message: dict) -> list[tuple[str, object]]:
    return [(c["name"], json.loads(c["arguments"])) for c in message["tool_calls"]]


# ------------------------------------------------------------------ no venv


def test_the_light_dependencies_take_the_releases_own_pins():
    metadata = ("Name: sglang\nRequires-Dist: transformers==5.19.0\nRequires-Dist: openai==2.8.0\n"
                "Requires-Dist: torch==2.14.1\nRequires-Dist: tokenizers==0.23.2\n"
                "Requires-Dist: av==16.1.0; sys_platform == \"linux\" and platform_machine == \"aarch64\"\n"
                "Requires-Dist: orjson\nRequires-Dist: runai-model-streamer>=0.15.7; extra == \"runai\"\n")
    wanted = light_requirements(metadata)
    assert "transformers==5.19.0" in wanted and "tokenizers==0.23.2" in wanted and "openai==2.8.0" in wanted
    assert "pydantic" in wanted and "partial_json_parser" in wanted  # not named by the release: unpinned
    assert not any(w.startswith(("torch", "av", "runai")) for w in wanted)


def test_a_release_without_a_pin_leaves_the_package_unpinned():
    assert light_requirements("Name: sglang\nRequires-Dist: transformers==5.8.1\n")[-1] == "tokenizers"


def test_a_non_streamed_answer_is_detokenized_every_fifty_ids():
    """output_streamer.py: a non-streamed request goes to the detokenizer when its length is a
    multiple of SGLANG_FORCE_STREAM_INTERVAL (50), then when it finishes."""
    output = list(range(120))
    assert [len(step) for step in sglang_worker.steps(output, None)] == [50, 50, 20]
    assert [len(step) for step in sglang_worker.steps(output[:100], None)] == [50, 50]
    assert [len(step) for step in sglang_worker.steps(output[:7], None)] == [7]
    assert [len(step) for step in sglang_worker.steps(output[:7], [3, 4])] == [3, 4]


def test_the_registry_declares_sglang_parse_only_and_versioned():
    info = engine_registry.lookup("sglang")
    assert info.renders is False and "parse_non_stream" in info.parses
    assert info.versions is not None and info.versions.bisect
    assert "sglang" in engine_registry.bisectable()


def test_models_name_sglang_parsers_its_registries_hold():
    """The names models.yaml gives are keys of FunctionCallParser.ToolCallParserEnum and
    ReasoningParser.DetectorMap (0.5.23); the engine refuses a name its release lacks when it
    opens (tested below)."""
    named = {m.name: (m.parser("sglang", "tool"), m.parser("sglang", "reasoning")) for m in CONFIG.models.values()}
    assert named["qwen3"] == ("qwen", "qwen3")
    assert named["gpt-oss"] == ("gpt-oss", "gpt-oss")
    assert named["gemma4"] == ("gemma4", "gemma4")
    assert named["llama3"] == ("llama3", None) and named["mistral-nemo"] == ("mistral", None)
    assert named["deepseek-v3"] == ("deepseekv3", None)
    assert named["phi3.5"] == named["command-r"] == named["gemma3"] == (None, None)


# ------------------------------------------------------------------ through the venv


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # SGLang's worker in its own venv
def qwen3(goldens_pool):
    return goldens_pool.engine("sglang", CONFIG.models["qwen3"], source_of("qwen3"))


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # SGLang's worker in its own venv
def gpt_oss(goldens_pool):
    return goldens_pool.engine("sglang", CONFIG.models["gpt-oss"], source_of("gpt-oss"))


@pytest.mark.integration
def test_qwen3_one_call(qwen3):
    output = round_trip("qwen3", ASK, {"role": "assistant", "content": "", "tool_calls": [call("Paris")]})
    whole = qwen3.parse(ASK, output, None).message
    assert arguments(whole) == [("get_weather", {"city": "Paris"})]
    assert whole["finish_reason"] == "tool_calls"
    # findings: the template's empty think block comes back as reasoning "\n\n"
    # (reasoning_parser.py _detect_and_parse_impl: reasoning_text = splits[0], never stripped),
    # and content "" where there is none (serving_chat.py: content=text if text else "")
    assert whole["reasoning_content"] == "\n\n" and whole["content"] == ""
    for name, plan in plans(len(output)).items():
        streamed = parse_api.assemble(qwen3.parse(ASK, output, plan).deltas)
        assert arguments(streamed) == arguments(whole), name
        assert streamed["finish_reason"] == "tool_calls", name
        assert streamed["reasoning_content"] == "\n\n", name
        # finding: a stream keeps the "\n\n" before <tool_call> as content, the whole parse
        # strips it (qwen25_detector.py detect_and_parse: normal_text = text[:idx].strip())
        assert streamed["content"] in ("\n\n", None), name


@pytest.mark.integration
def test_qwen3_parallel_calls(qwen3):
    output = round_trip("qwen3", ASK_TWO, {"role": "assistant", "content": "",
                                           "tool_calls": [call("Paris"), call("Rome")]})
    whole = qwen3.parse(ASK_TWO, output, None).message
    expected = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert arguments(whole) == expected and whole["finish_reason"] == "tool_calls"
    for name, plan in plans(len(output)).items():
        streamed = parse_api.assemble(qwen3.parse(ASK_TWO, output, plan).deltas)
        assert arguments(streamed) == expected, name
        assert streamed["finish_reason"] == "tool_calls", name


@pytest.mark.integration
def test_a_chunk_holding_whole_calls_loses_their_arguments_and_the_second_call(qwen3):
    """Finding: BaseFormatDetector.parse_streaming_increment (base_format_detector.py) does one
    step per increment: the first call's name, and nothing more of the chunk; the base finish()
    flushes nothing, and _check_for_unstreamed_tool_args reads prev_tool_call_arr, which only
    the arguments step fills. A step that brings a whole call (speculative decoding, a
    stream_interval above 1) streams the name with arguments "" and drops the later calls."""
    output = round_trip("qwen3", ASK_TWO, {"role": "assistant", "content": "",
                                           "tool_calls": [call("Paris"), call("Rome")]})
    streamed = parse_api.assemble(qwen3.parse(ASK_TWO, output, [len(output)]).deltas)
    assert streamed["tool_calls"] == [{"name": "get_weather", "arguments": ""}]
    assert streamed["finish_reason"] == "tool_calls"


@pytest.mark.integration
def test_qwen3_reasoning_then_answer(qwen3):
    output = round_trip("qwen3", CHAT, {"role": "assistant", "reasoning_content": "Two plus two is four.",
                                        "content": "4."})
    whole = qwen3.parse(CHAT, output, None).message
    # findings: the newlines the template writes around the reasoning and before the answer
    # stay in both (reasoning_parser.py _detect_and_parse_impl splits at </think>, no strip)
    assert whole == {"content": "\n\n4.", "reasoning_content": "\nTwo plus two is four.\n",
                     "tool_calls": [], "finish_reason": "stop"}
    for name, plan in plans(len(output)).items():
        assert parse_api.assemble(qwen3.parse(CHAT, output, plan).deltas) == whole, name


@pytest.mark.integration
def test_qwen3_plain_answer_without_thinking(qwen3):
    request = {**CHAT, "chat_template_kwargs": {"enable_thinking": False}}
    output = round_trip("qwen3", request, {"role": "assistant", "content": "4."})
    whole = qwen3.parse(request, output, None).message
    assert whole == {"content": "4.", "reasoning_content": None, "tool_calls": [], "finish_reason": "stop"}
    for name, plan in plans(len(output)).items():
        deltas = qwen3.parse(request, output, plan).deltas
        assert len(deltas) == len(plan)
        assert parse_api.assemble(deltas) == whole, name


@pytest.mark.integration
def test_an_output_cut_before_its_end_finishes_with_length(qwen3):
    output = round_trip("qwen3", CHAT, {"role": "assistant", "content": "The answer is four."})[:-3]
    whole = qwen3.parse(CHAT, output, None).message
    assert whole["finish_reason"] == "length" and whole["content"].endswith("is")
    assert parse_api.assemble(qwen3.parse(CHAT, output, [1] * len(output)).deltas) == whole


@pytest.mark.integration
def test_a_plan_that_does_not_cover_the_output_is_an_engine_error(qwen3):
    from generator.errors import EngineError

    with pytest.raises(EngineError, match="chunk plan"):
        qwen3.parse(CHAT, [151645], [2])


@pytest.mark.integration
def test_a_request_sglang_refuses_is_refused(qwen3):
    from generator.errors import Refused

    with pytest.raises(Refused):
        qwen3.parse({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
                    encoded("qwen3", "hi<|im_end|>"), None)


GPT_CALL = ("<|channel|>analysis<|message|>I need the weather.<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>')
GPT_TWO = ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
           '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
           '{"city": "Rome"}<|call|>')


@pytest.mark.integration
def test_gpt_oss_reasoning_then_a_call(gpt_oss):
    """The call as openai-harmony renders one (recipient after the channel), ended by <|call|>,
    which the detokenizer keeps under the gpt-oss tool parser (trim_matched_stop)."""
    output = encoded("gpt-oss", GPT_CALL)
    whole = gpt_oss.parse(ASK, output, None).message
    assert arguments(whole) == [("get_weather", {"city": "Paris"})]
    assert whole["reasoning_content"] == "I need the weather." and whole["finish_reason"] == "tool_calls"
    for name, plan in plans(len(output)).items():
        streamed = parse_api.assemble(gpt_oss.parse(ASK, output, plan).deltas)
        assert {**streamed, "content": ""} == whole, name  # content: None streamed, "" whole


@pytest.mark.integration
def test_gpt_oss_parallel_calls(gpt_oss):
    output = encoded("gpt-oss", GPT_TWO)
    whole = gpt_oss.parse(ASK_TWO, output, None).message
    expected = [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome"})]
    assert arguments(whole) == expected and whole["finish_reason"] == "tool_calls"
    for name, plan in plans(len(output)).items():
        assert arguments(parse_api.assemble(gpt_oss.parse(ASK_TWO, output, plan).deltas)) == expected, name


@pytest.mark.integration
def test_gpt_oss_reasoning_then_answer_and_a_plain_answer(gpt_oss):
    for assistant, expected in (
            ({"role": "assistant", "thinking": "Two plus two is four.", "content": "4."},
             {"content": "4.", "reasoning_content": "Two plus two is four.", "tool_calls": [], "finish_reason": "stop"}),
            ({"role": "assistant", "content": "Hello! How can I help?"},
             {"content": "Hello! How can I help?", "reasoning_content": None, "tool_calls": [],
              "finish_reason": "stop"})):
        output = round_trip("gpt-oss", CHAT, assistant)
        assert gpt_oss.parse(CHAT, output, None).message == expected
        for name, plan in plans(len(output)).items():
            assert parse_api.assemble(gpt_oss.parse(CHAT, output, plan).deltas) == expected, name


@pytest.mark.integration
def test_gpt_oss_call_as_its_template_writes_it_is_not_parsed(gpt_oss):
    """Finding: gpt-oss's template writes a call's recipient in the header, before the channel
    (`<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>`); SGLang's
    HarmonyParser takes the recipient from after the channel only, so the call comes back as
    content, <|call|> included, and a stream repeats the header text."""
    output = round_trip("gpt-oss", ASK, {"role": "assistant", "content": "", "tool_calls": [call("Paris")]})
    whole = gpt_oss.parse(ASK, output, None).message
    assert whole["tool_calls"] == [] and whole["finish_reason"] == "stop"
    assert whole["content"].startswith(" to=functions.get_weather<|channel|>commentary json<|message|>")
    streamed = parse_api.assemble(gpt_oss.parse(ASK, output, [1] * len(output)).deltas)
    assert streamed["tool_calls"] == [] and streamed["content"] == " to=functions.get_weather" * 2


@pytest.mark.integration
def test_the_engine_reports_its_release_and_parse_only(qwen3):
    from generator.errors import EngineError

    assert qwen3.version() == "0.5.23"
    with pytest.raises(EngineError, match="parse-only"):
        qwen3.ids(CHAT)


@pytest.mark.integration
def test_gpt_oss_call_with_no_analysis_before_it_is_missed_whole_but_not_streamed(gpt_oss):
    """Finding: GptOssDetector.has_tool_call (function_call/gpt_oss_detector.py) looks for
    `<|start|>assistant<|channel|>commentary`, but the generation prompt ends in
    `<|start|>assistant`, so an output that opens with its call never holds it: serving_chat's
    _process_tool_calls (`parser.has_tool_call(text)`) skips the parser and the whole answer is
    the raw harmony text, <|call|> included (kept by trim_matched_stop), finish "stop"; the
    stream, parsed event by event, finds the call."""
    text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'
    output = encoded("gpt-oss", text)
    whole = gpt_oss.parse(ASK, output, None).message
    assert whole == {"content": text, "reasoning_content": None, "tool_calls": [], "finish_reason": "stop"}
    streamed = parse_api.assemble(gpt_oss.parse(ASK, output, [1] * len(output)).deltas)
    assert arguments(streamed) == [("get_weather", {"city": "Paris"})] and streamed["finish_reason"] == "tool_calls"
