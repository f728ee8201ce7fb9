"""llama-server's output side: goldens-parse (generator/engines/llama_server/llama_parse/goldens-parse.cpp) fed
output ids the reference renders, whole and streamed in several chunkings.

The output ids come from the reference by round trip: the conversation rendered with the
assistant message, minus the rendering without it (the generation prompt), up to and including
the model's end token. Each case says the message those ids encode; where llama.cpp's parse
differs from it, the test names the difference and the source line behind it.
"""

from __future__ import annotations

import datetime as _dt
import json
import random
from pathlib import Path

import pytest
from conftest import CONFIG, engine_of, source_of, tokenizer_of

from generator import reference
from generator.engines import EngineError, Refused, parse
from generator.engines.llama_server.engine import LlamaServerEngine
from generator.engines.llama_server.parse_harness import ParseHarness

INTEGRATION = pytest.mark.integration  # a build, the harness or llama-server starts

DATE = _dt.date(2026, 1, 1)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time in a timezone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris, and the time in Tokyo?"}]
END = {"qwen3": {"<|im_end|>"}, "gpt-oss": {"<|return|>", "<|call|>"}}  # what ends a turn


def call(name: str, **arguments) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


# case -> (tools sent, the assistant message the model emits, the finish_reason it implies)
CASES = {
    "qwen3": {
        "call": ([WEATHER], {"role": "assistant", "content": "", "tool_calls": [call("get_weather", city="Paris")]},
                 "tool_calls"),
        "parallel-calls": ([WEATHER, TIME], {"role": "assistant", "content": "", "tool_calls": [
            call("get_weather", city="Paris"), call("get_time", tz="Asia/Tokyo")]}, "tool_calls"),
        "reasoning-then-answer": (None, {"role": "assistant", "reasoning_content": "Paris is in France; say so.",
                                         "content": "It is sunny in Paris."}, "stop"),
        "reasoning-then-call": ([WEATHER], {"role": "assistant", "reasoning_content": "I need the tool.",
                                            "content": "", "tool_calls": [call("get_weather", city="Paris")]},
                                "tool_calls"),
        "answer": (None, {"role": "assistant", "content": "Sunny, 21 °C. 晴れ 🌤"}, "stop"),
    },
    "gpt-oss": {
        "call": ([WEATHER], {"role": "assistant", "content": "", "thinking": "Need the weather tool.",
                             "tool_calls": [call("get_weather", city="Paris")]}, "tool_calls"),
        "reasoning-then-answer": (None, {"role": "assistant", "thinking": "Paris is in France; say so.",
                                         "content": "It is sunny in Paris."}, "stop"),
        "answer": (None, {"role": "assistant", "content": "Sunny, 21 °C. 晴れ 🌤"}, "stop"),
    },
}
# gpt-oss: its template writes `thinking` only before a call or on the last message, and
# <|call|> ends generation (an end-of-generation token in llama.cpp's vocab), so one generation
# holds one call: parallel calls are consecutive turns, which llama-server cannot stream as one.


# Where b11434's parse is not the message the output encodes: (model, case) -> the message it
# gives instead, made from the expected one, and the line responsible. A case listed here must
# still differ, so a build that fixes it fails the test until the entry goes.
def _with(**changes):
    return lambda message: {**message, **changes}


KNOWN = {
    # Qwen3's template writes "<think>\n" + reasoning + "\n</think>"; the autoparser reads reasoning
    # up to the end tag trimmed of whitespace, so the newline before it stays in reasoning_content:
    # common/chat-auto-parser-generator.cpp:149 `p.reasoning(p.until(trim_whitespace(end)))`
    ("qwen3", "reasoning-then-answer"): _with(reasoning_content="Paris is in France; say so.\n"),
    ("qwen3", "reasoning-then-call"): _with(reasoning_content="I need the tool.\n"),
}


def request_of(tools) -> dict:
    request = {"messages": ASK, "add_generation_prompt": True}
    if tools:
        request["tools"] = tools
    return request


def output_of(model: str, request: dict, assistant: dict) -> list[int]:
    """The ids after the generation prompt in the conversation rendered with `assistant`, up to
    and including the first end token."""
    tokenizer, template = tokenizer_of(model), source_of(model).template
    prompt = reference.render_prompt(tokenizer, template, request, DATE)
    full = reference.render_prompt(tokenizer, template, {**request, "messages": [*request["messages"], assistant],
                                                         "add_generation_prompt": False}, DATE)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
    assert full_ids[:len(prompt_ids)] == prompt_ids, "the generation prompt is not a prefix"
    output = full_ids[len(prompt_ids):]
    ends = [i for i, token in enumerate(tokenizer.convert_ids_to_tokens(output)) if token in END[model]]
    assert ends, f"{model}: no end token in {tokenizer.decode(output)!r}"
    return output[:ends[0] + 1]


def expected(assistant: dict, finish: str) -> parse.Message:
    """The message the output encodes, normalized (arguments as JSON text, compared as JSON)."""
    return {"content": assistant.get("content") or None,
            "reasoning_content": assistant.get("reasoning_content") or assistant.get("thinking") or None,
            "tool_calls": [{"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])}
                           for c in assistant.get("tool_calls", [])],
            "finish_reason": finish}


def same(got: parse.Message, want: parse.Message) -> bool:
    """Equal messages, arguments compared as JSON; an empty text is no text (llama-server writes
    content "" for a message without content: common/chat.cpp to_json_oaicompat, `jmsg["content"] = ""`)."""
    def key(message):
        return ({k: message[k] or None for k in ("content", "reasoning_content")},
                [(c["name"], json.loads(c["arguments"])) for c in message["tool_calls"]],
                message["finish_reason"])
    return key(got) == key(want)


def plans(n: int) -> dict[str, list[int]]:
    """Chunk plans for an output of n ids: one per id, threes, two halves, a seeded random one."""
    rng = random.Random(n)
    cuts = sorted(rng.sample(range(1, n), min(4, n - 1)))
    return {"one-per-id": [1] * n,
            "threes": [3] * (n // 3) + ([n % 3] if n % 3 else []),
            "halves": [n // 2, n - n // 2],
            "random": [b - a for a, b in zip([0, *cuts], [*cuts, n])]}


def engine(pool, model: str) -> LlamaServerEngine:
    made = engine_of(pool, "llama-server", model)
    assert isinstance(made, LlamaServerEngine)
    return made


ALL = [(model, case) for model, cases in CASES.items() for case in cases]


@INTEGRATION
@pytest.mark.parametrize("model,case", ALL)
def test_the_whole_output_parses_to_the_message_it_encodes(pool, model, case):
    tools, assistant, finish = CASES[model][case]
    request = request_of(tools)
    parsed = engine(pool, model).parse(request, output_of(model, request, assistant), None)
    assert parsed.deltas is None and parsed.message is not None
    want = expected(assistant, finish)
    if (model, case) in KNOWN:
        assert not same(parsed.message, want), f"{model}/{case} is parsed right now: drop its KNOWN entry"
        want = KNOWN[model, case](want)
    assert same(parsed.message, want), parsed.message


@INTEGRATION
@pytest.mark.parametrize("model,case", ALL)
def test_every_chunking_assembles_to_the_whole_parse(pool, model, case):
    tools, assistant, finish = CASES[model][case]
    request = request_of(tools)
    output = output_of(model, request, assistant)
    whole = engine(pool, model).parse(request, output, None).message
    for name, plan in plans(len(output)).items():
        streamed = engine(pool, model).parse(request, output, plan)
        assert streamed.deltas is not None and len(streamed.deltas) == len(plan), name
        assembled = parse.assemble(streamed.deltas)
        assert same(assembled, whole), (name, assembled, whole)
        assert assembled["tool_calls"] == whole["tool_calls"], name  # the arguments' very text too
        finals = [d for chunk in streamed.deltas for d in chunk if "finish_reason" in d]
        assert finals == [{"finish_reason": finish}] and streamed.deltas[-1][-1] == finals[0], name
        for chunk in streamed.deltas:  # no delimiter or end token in the text a client shows
            for delta in chunk:
                for text in (delta.get("content", ""), delta.get("reasoning_content", "")):
                    assert not any(mark in text for mark in ("<think>", "</think>", "<tool_call>", "<|im_end|>",
                                                             "<|channel|>", "<|message|>", "<|end|>")), (name, delta)


QWEN_EMPTY_THINKING = "<think>\n\n</think>\n\n"


@INTEGRATION
@pytest.mark.parametrize("text,want,line", [
    # the template writes content, "\n", then the calls; content runs up to "<tool_call>":
    # common/chat-auto-parser-generator.cpp:237 `p.optional(p.content(p.until(tool_start)))`
    ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     {"content": "Let me check.\n", "tool_calls": [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]},
     "content keeps the newline before the call"),
    # arguments sent as a JSON string: the mapper takes arguments only when they start with "{",
    # and the call keeps the "{" it was opened with, closed: common/chat-peg-parser.cpp:379
    ('<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}\n</tool_call>',
     {"content": None, "tool_calls": [{"name": "get_weather", "arguments": "{}"}]},
     "string arguments become {}"),
])
def test_qwen3_outputs_llama_cpp_parses_otherwise(pool, text, want, line):
    """Outputs whose message llama.cpp b11434 gets wrong without refusing them (findings)."""
    tokenizer = tokenizer_of("qwen3")
    output = tokenizer(QWEN_EMPTY_THINKING + text + "<|im_end|>", add_special_tokens=False)["input_ids"]
    got = engine(pool, "qwen3").parse(request_of([WEATHER]), output, None).message
    assert {"content": got["content"] or None, "tool_calls": got["tool_calls"]} == want, line
    streamed = engine(pool, "qwen3").parse(request_of([WEATHER]), output, [1] * len(output))
    assert same(parse.assemble(streamed.deltas), got), line


@INTEGRATION
@pytest.mark.parametrize("model,text", [
    # only the declared tools' names parse: common/chat-peg-parser.cpp:802 (qwen3's JSON calls),
    # common/parsers/gpt-oss.cpp:114 (gpt-oss's recipients)
    ("qwen3", QWEN_EMPTY_THINKING + '<tool_call>\n{"name": "not_a_tool", "arguments": {"x": 1}}\n</tool_call><|im_end|>'),
    ("gpt-oss", '<|channel|>commentary to=functions.not_a_tool <|constrain|>json<|message|>{"x": 1}<|call|>'),
    # nothing may follow the calls: common/chat-auto-parser-generator.cpp:237 `tools_parser + p.end()`
    ("qwen3", QWEN_EMPTY_THINKING + '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
              '</tool_call>\nDone.<|im_end|>'),
])
def test_an_output_the_parser_rejects_is_an_http_500(pool, model, text):
    """The final parse throws (common/chat.cpp: "does not match the expected ... format"): a
    whole answer is HTTP 500, a stream ends on an error event, both Refused."""
    output = tokenizer_of(model)(text, add_special_tokens=False)["input_ids"]
    with pytest.raises(Refused, match=r"HTTP 500: .*does not match the expected peg-native format"):
        engine(pool, model).parse(request_of([WEATHER]), output, None)
    with pytest.raises(Refused, match=r"the stream ended with an error at chunk \d+"):
        engine(pool, model).parse(request_of([WEATHER]), output, [1] * len(output))


@INTEGRATION
def test_gpt_oss_stops_at_its_first_call(pool):
    """<|call|> is an end-of-generation id (src/llama-vocab.cpp:2930), so a second call in the
    same output is never generated: llama-server gives one call where the ids hold two."""
    text = "".join(f'<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>'
                   f'{json.dumps(args)}<|call|>' for name, args in
                   [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Asia/Tokyo"})])
    output = tokenizer_of("gpt-oss")(text[len("<|start|>assistant"):], add_special_tokens=False)["input_ids"]
    got = engine(pool, "gpt-oss").parse(request_of([WEATHER, TIME]), output, None).message
    assert got["tool_calls"] == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    assert got["finish_reason"] == "tool_calls"


@INTEGRATION
def test_a_plan_of_one_id_per_chunk_sends_each_ids_text_as_it_comes(pool):
    """llama-server parses after every id: a Qwen3 answer's content arrives in as many deltas as
    it has text ids (the first chunk also carries the role delta, normalized to {})."""
    tools, assistant, _ = CASES["qwen3"]["reasoning-then-answer"]
    request = request_of(tools)
    output = output_of("qwen3", request, assistant)
    streamed = engine(pool, "qwen3").parse(request, output, [1] * len(output))
    assert streamed.deltas[0][0] == {}  # {"role": "assistant", "content": null}
    answer_ids = tokenizer_of("qwen3")("It is sunny in Paris.", add_special_tokens=False)["input_ids"]
    content = [d["content"] for chunk in streamed.deltas for d in chunk if "content" in d]
    assert "".join(content) == "It is sunny in Paris." and len(content) == len(answer_ids)


@INTEGRATION
def test_a_character_split_across_ids_is_held_back_until_whole(pool):
    """process_token sends nothing while the text ends inside a UTF-8 sequence: an emoji whose
    bytes span two ids arrives whole, in the chunk of its last id."""
    tokenizer = tokenizer_of("qwen3")
    text = "Clef: 𝄞."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    assert any("\ufffd" in piece for piece in pieces), f"{text!r} has no id that splits a character: {pieces}"
    output = [*tokenizer("<think>\n\n</think>\n\n", add_special_tokens=False)["input_ids"], *ids,
              *tokenizer.convert_tokens_to_ids(["<|im_end|>"])]
    streamed = engine(pool, "qwen3").parse(request_of(None), output, [1] * len(output))
    content = [d["content"] for chunk in streamed.deltas for d in chunk if "content" in d]
    assert "".join(content) == text and not any("\ufffd" in c for c in content), content


@INTEGRATION
def test_an_output_cut_before_its_end_finishes_with_length(pool):
    tools, assistant, _ = CASES["qwen3"]["reasoning-then-answer"]
    request = request_of(tools)
    output = output_of("qwen3", request, assistant)[:-3]  # no <|im_end|>, the answer's end cut
    whole = engine(pool, "qwen3").parse(request, output, None).message
    assert whole["finish_reason"] == "length" and whole["content"].startswith("It is sunny")
    streamed = engine(pool, "qwen3").parse(request, output, [1] * len(output))
    assert parse.assemble(streamed.deltas)["finish_reason"] == "length"


@INTEGRATION
def test_ids_after_the_end_token_are_never_generated(pool):
    """The slot stops at the first end-of-generation id: later chunks get no deltas."""
    tools, assistant, _ = CASES["qwen3"]["answer"]
    request = request_of(tools)
    output = output_of("qwen3", request, assistant)
    tail = tokenizer_of("qwen3")("More text.", add_special_tokens=False)["input_ids"]
    whole = engine(pool, "qwen3").parse(request, output + tail, None).message
    assert whole["content"] == assistant["content"] and whole["finish_reason"] == "stop"
    streamed = engine(pool, "qwen3").parse(request, output + tail, [len(output), len(tail)])
    assert streamed.deltas[1] == [] and parse.assemble(streamed.deltas)["content"] == assistant["content"]


@INTEGRATION
def test_a_request_the_server_refuses_is_refused(pool):
    """oaicompat_chat_params_parse raises invalid_argument (HTTP 400) for a user message with no
    content, before any id is parsed."""
    output = tokenizer_of("qwen3")("Hi<|im_end|>", add_special_tokens=False)["input_ids"]
    with pytest.raises(Refused, match=r"HTTP 400: .*must contain 'content'"):
        engine(pool, "qwen3").parse({"messages": [{"role": "user"}]}, output, None)


@INTEGRATION
def test_a_plan_that_does_not_cover_the_output_is_an_error(pool):
    with pytest.raises(EngineError, match="a chunk plan of 3 ids for an output of 4"):
        engine(pool, "qwen3").parse(request_of(None), [1, 2, 3, 4], [1, 2])


def test_a_server_given_by_url_cannot_parse():
    with pytest.raises(EngineError, match="needs the managed llama-server's GGUF and build"):
        LlamaServerEngine("http://127.0.0.1:9").parse(request_of(None), [1], None)


@INTEGRATION
def test_a_harness_that_does_not_answer_is_killed_within_its_bound(tmp_path: Path):
    """A real process that prints its ready line, then never answers: the wait is bounded."""
    harness = ParseHarness(Path("/bin/sh"), ["-c", 'echo \'{"build": 1}\'; sleep 60'], case_seconds=1.0)
    assert harness.ready == {"build": 1}
    with pytest.raises(EngineError, match=r"no answer within 1 s \(killed\)"):
        harness.ask({"body": {}, "output": [1], "chunks": None})
    with pytest.raises(EngineError, match="the harness has exited"):
        harness.ask({"body": {}, "output": [1], "chunks": None})
    harness.stop()


@INTEGRATION
def test_the_harness_is_the_servers_build(pool):
    """The harness reports the build_info the managed llama-server reports in /props."""
    made = engine(pool, "qwen3")
    made.parse(request_of(None), output_of("qwen3", request_of(None), CASES["qwen3"]["answer"][1]), None)
    assert made._harness is not None and made._harness.ready["build_info"] == made.version()


OLDER = 9113  # the upgrade tests' older build (tests/test_engine_versions.py)


@INTEGRATION
def test_an_older_build_parses_through_its_own_harness(pool):
    """llama-server@9113 gets a harness built from its own tree and server library; it parses
    Qwen3's call and answer as b11434 does, whole and one id per chunk."""
    older = pool.engine(f"llama-server@{OLDER}", CONFIG.models["qwen3"], source_of("qwen3"))
    assert isinstance(older, LlamaServerEngine)
    for case in ("call", "answer"):
        tools, assistant, _ = CASES["qwen3"][case]
        request = request_of(tools)
        output = output_of("qwen3", request, assistant)
        for plan in (None, [1] * len(output)):
            assert older.parse(request, output, plan) == engine(pool, "qwen3").parse(request, output, plan), case
    assert older._harness is not None and older._harness.ready["build"] == OLDER


def test_the_harness_joins_a_tree_with_a_server_library_and_says_why_not_otherwise(tmp_path: Path):
    """The harness becomes one more target of tools/server/ when the build links its server code
    into `server-context`; an older layout gets the reason `parse` will print."""
    from generator.engines.llama_server import llama_cpp

    server = tmp_path / "new" / "tools" / "server"
    server.mkdir(parents=True)
    (server / "CMakeLists.txt").write_text("set(TARGET server-context)\nadd_library(${TARGET} STATIC x.cpp)\n")
    assert llama_cpp._add_harness(tmp_path / "new") is None
    assert (server / "goldens-parse.cpp").read_bytes() == llama_cpp.HARNESS.read_bytes()
    assert "target_link_libraries(goldens-parse PRIVATE server-context)" in (server / "CMakeLists.txt").read_text()
    old = tmp_path / "old" / "examples" / "server"
    old.mkdir(parents=True)
    (old / "CMakeLists.txt").write_text("set(TARGET llama-server)\nadd_executable(${TARGET} server.cpp)\n")
    assert llama_cpp._add_harness(tmp_path / "old") == \
        "its llama-server has no server-context library to link the parse harness against"
