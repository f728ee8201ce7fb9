"""llama-server engines against real llama-server processes, Transformers 5.24.0 as reference.

The servers are the session's (conftest.py): one tiny-model server per model (qwen3, gemma3,
phi3.5), shared with every other test file. Nothing is skipped: if llama-server cannot be built
or a server cannot start, the fixtures error.
"""

from __future__ import annotations

import sys

import httpx
import pytest
from conftest import server_of, source_of, tier, tokenizer_of
from transformers.utils import get_json_schema

from generator.engines import EngineError, first_divergence
from generator.engines.llama_server.engine import ClientCompletionEngine, LlamaServerEngine
from generator.errors import GoldensError
from generator.engines.llama_server.llama_cpp import LlamaServer, llama_server_binary, llama_server_version
from generator.servers.process import ManagedServer
from generator.engines.llama_server.tiny_gguf import tiny_gguf
from generator.sources import pack, vectors

pytestmark = pytest.mark.integration  # llama-server builds and starts, ManagedServer starts

QUESTION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2 + 2?"},
]


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city name.
    """
    return "sunny"


def reference_ids(tokenizer, request: dict) -> list[int]:
    return tokenizer.apply_chat_template(
        request["messages"], tools=request.get("tools"), tokenize=True,
        add_generation_prompt=request.get("add_generation_prompt", True), return_dict=False,
        **request.get("chat_template_kwargs", {}),
    )


HTTP = httpx.Client(timeout=30)  # keep-alive: a fresh client per call costs ~80 ms


def server_tokens(url: str, text: str, *, add_special: bool, parse_special: bool, pieces=False):
    reply = HTTP.post(
        f"{url}/tokenize",
        json={"content": text, "add_special": add_special, "parse_special": parse_special,
              "with_pieces": pieces},
    )
    reply.raise_for_status()
    return reply.json()["tokens"]


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def llama_source():
    return pack.llama_cpp_source()


@pytest.fixture(scope="session")
@tier(pytest.mark.integration)  # the pinned llama.cpp build
def binary():
    return llama_server_binary()


@pytest.fixture(scope="session")
def qwen_tokenizer():
    return tokenizer_of("qwen3")


@pytest.fixture(scope="session")
def gemma_tokenizer():
    return tokenizer_of("gemma3")


@pytest.fixture
@tier(pytest.mark.integration)  # a llama-server started
def gemma_server(pool):
    return server_of(pool, "llama-server", "gemma3")


@pytest.fixture
@tier(pytest.mark.integration)  # a llama-server started
def phi35_server(pool):
    return server_of(pool, "llama-server", "phi3.5")


# ---------------------------------------------------------------------------------- binary


def test_binary_is_the_pinned_build(binary):
    assert llama_server_version(binary) == pack.LLAMA_CPP_BUILD == 11434


# ---------------------------------------------------------------------------------- Qwen3


def test_qwen3_plain_matches_transformers(qwen3_llama_server, qwen_tokenizer):
    request = {"messages": QUESTION}
    expected = reference_ids(qwen_tokenizer, request)
    ids = LlamaServerEngine(qwen3_llama_server.url).ids(request)
    assert ids == expected
    assert len(ids) == 25
    assert ids[:9] == [151644, 8948, 198, 2610, 525, 50537, 13, 151645, 198]
    assert ids.prompt.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert ids.pieces[:3] == ["<|im_start|>", "system", "\n"]


def test_qwen3_thinking_off_matches_transformers(qwen3_llama_server, qwen_tokenizer):
    request = {"messages": QUESTION, "chat_template_kwargs": {"enable_thinking": False}}
    expected = reference_ids(qwen_tokenizer, request)
    ids = LlamaServerEngine(qwen3_llama_server.url).ids(request)
    assert len(expected) == len(ids) == 29
    assert ids == expected
    assert ids[-4:] == [151667, 271, 151668, 271]


def test_qwen3_tool_return_key_is_dropped_by_the_server(qwen3_llama_server, qwen_tokenizer):
    schema = get_json_schema(get_weather)
    assert list(schema["function"]) == ["name", "description", "parameters", "return"]
    request = {"messages": QUESTION, "tools": [schema]}
    expected = reference_ids(qwen_tokenizer, request)
    ids = LlamaServerEngine(qwen3_llama_server.url).ids(request)
    assert (len(expected), len(ids)) == (177, 168)
    assert first_divergence(expected, ids) == 106
    assert '"return"' not in ids.prompt

    reduced = {"type": "function",
               "function": {k: schema["function"][k] for k in ("name", "description", "parameters")}}
    request = {"messages": QUESTION, "tools": [reduced]}
    assert LlamaServerEngine(qwen3_llama_server.url).ids(request) == reference_ids(qwen_tokenizer, request)


def test_parse_special_off_splits_marker_text(qwen3_llama_server):
    url = qwen3_llama_server.url
    pieces = server_tokens(url, "<|im_start|>", add_special=False, parse_special=False, pieces=True)
    assert [p["piece"] for p in pieces] == ["<", "|", "im", "_start", "|", ">"]
    on = server_tokens(url, "<|im_start|>", add_special=False, parse_special=True)
    assert on == [151644]


def test_qwen3_confirm_counts_golden_tokens_on_real_endpoints(qwen3_llama_server, qwen_tokenizer):
    request = {"messages": QUESTION}
    golden = reference_ids(qwen_tokenizer, request)
    served = LlamaServerEngine(qwen3_llama_server.url).serve(request, golden)
    assert served.counts == {"/v1/chat/completions usage.prompt_tokens": 25, "/completion tokens_evaluated": 25}
    assert served.ids is None and served.refused is None


def test_qwen3_continue_final_message(qwen3_llama_server, qwen_tokenizer):
    messages = [*QUESTION, {"role": "assistant", "content": "The answer is"}]
    request = {"messages": messages, "add_generation_prompt": False, "continue_final_message": True}
    expected = qwen_tokenizer.apply_chat_template(
        messages, tokenize=True, continue_final_message=True, return_dict=False
    )
    ids = LlamaServerEngine(qwen3_llama_server.url).ids(request)
    assert ids.prompt.endswith("The answer is")
    assert ids == expected


# ---------------------------------------------------------------------------------- Gemma 3


def test_gemma3_server_matches_transformers_and_client_doubles_bos(gemma_server, gemma_tokenizer):
    request = {"messages": QUESTION}
    expected = reference_ids(gemma_tokenizer, request)
    engine = LlamaServerEngine(gemma_server.url)
    ids = engine.ids(request)
    assert ids == expected
    assert len(ids) == 22 and ids[:3] == [2, 105, 2364]
    # the server strips the template's own <bos> because its tokenizer adds one
    assert ids.prompt.startswith("<start_of_turn>user\n")

    def render(req):
        return gemma_tokenizer.apply_chat_template(
            req["messages"], tokenize=False, add_generation_prompt=True
        )

    client = ClientCompletionEngine(gemma_server.url, render).ids(request)
    assert client.prompt.startswith("<bos><start_of_turn>")
    assert len(client) == 23 and client[:3] == [2, 2, 105]
    assert first_divergence(expected, client) == 1


# ---------------------------------------------------------------------------------- vocab checks


def test_phi35_tiny_model_carries_the_real_phi3_vocab(phi35_server, llama_source):
    props = HTTP.get(f"{phi35_server.url}/props").json()
    template = (llama_source / "models/templates/microsoft-Phi-3.5-mini-instruct.jinja").read_text()
    assert props["chat_template"] == template
    cases = vectors.read(llama_source / "models/ggml-vocab-phi-3.gguf")
    assert len(cases) == 46
    for text, expected in cases:
        assert server_tokens(phi35_server.url, text, add_special=False, parse_special=False) == expected, text


@pytest.mark.parametrize("model", ["qwen3", "gemma3"])
def test_tiny_vocab_tokenizes_like_transformers(model, pool, llama_source):
    """The converted vocab on llama.cpp's own test texts: same ids as the HF tokenizer."""
    server = server_of(pool, "llama-server", model)
    tokenizer = tokenizer_of(model)
    for text, _ in vectors.read(llama_source / "models/ggml-vocab-phi-3.gguf"):
        expected = tokenizer.encode(text, add_special_tokens=False)
        assert server_tokens(server.url, text, add_special=False, parse_special=False) == expected, repr(text)


# ---------------------------------------------------------------------------------- faults


def test_stopped_server_is_an_engine_error_naming_the_url(binary):
    """Its own server (the session's are shared): started, answered, stopped, then asked again."""
    source = source_of("qwen3")
    server = LlamaServer(tiny_gguf("qwen3", source.tokenizer_dir, source.template), binary=binary).start()
    url = server.url
    engine = LlamaServerEngine(url)
    assert len(engine.ids({"messages": QUESTION})) == 25
    server.stop()
    assert not server.running
    with pytest.raises(EngineError) as error:
        engine.ids({"messages": QUESTION})
    assert url in str(error.value) and "llama-server" in str(error.value)
    with pytest.raises(EngineError, match="client-completion"):
        ClientCompletionEngine(url, lambda r: "hi").ids({"messages": QUESTION})


def test_http_error_shows_the_server_body(qwen3_llama_server):
    with pytest.raises(EngineError) as error:
        LlamaServerEngine(qwen3_llama_server.url).ids({"messages": [{"role": "user"}]})
    message = str(error.value)
    assert "HTTP 4" in message or "HTTP 5" in message
    assert "content" in message and qwen3_llama_server.url in message


def test_both_generation_flags_are_refused_by_the_server(qwen3_llama_server):
    request = {"messages": [*QUESTION, {"role": "assistant", "content": "4"}],
               "add_generation_prompt": True, "continue_final_message": True}
    with pytest.raises(EngineError, match="Cannot set both"):
        LlamaServerEngine(qwen3_llama_server.url).ids(request)


def test_render_failure_is_an_engine_error(qwen3_llama_server):
    def broken(request):
        raise ValueError("template exploded")

    expected = "client-completion: rendering the prompt failed: template exploded"
    with pytest.raises(EngineError, match=expected):
        ClientCompletionEngine(qwen3_llama_server.url, broken).ids({"messages": QUESTION})


def test_server_that_exits_reports_its_log():
    server = ManagedServer(
        [sys.executable, "-c", "import sys; print('boom: bad flag'); sys.exit(3)"], name="exits",
        startup_timeout=10,
    )
    with pytest.raises(GoldensError, match=r"exited with code 3[\s\S]*boom: bad flag"):
        server.start()
    assert not server.running


def test_server_that_never_gets_healthy_times_out_with_its_log(tmp_path):
    server = ManagedServer(
        [sys.executable, "-u", "-m", "http.server", "--bind", "{host}", "{port}"],
        name="never-healthy", cwd=tmp_path, startup_timeout=3,
    )
    with pytest.raises(GoldensError, match=r"not healthy after 3s \(HTTP 404\)[\s\S]*GET /health"):
        server.start()
    assert not server.running
