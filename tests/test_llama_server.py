"""llama-server engines against real llama-server processes, Transformers 5.24.0 as reference.

One tiny-model server per tokenizer per session (qwen3, gemma3, phi-3). Nothing is skipped:
if llama-server cannot be built or a server cannot start, the fixtures error.
"""

from __future__ import annotations

import json
import sys

import httpx
import pytest
from transformers import AutoTokenizer
from transformers.utils import get_json_schema

from generator.engines import Engine, EngineError
from generator.engines.llama_server import ClientCompletionEngine, LlamaServerEngine
from generator.errors import GoldensError
from generator.servers.llama_cpp import LlamaServer, llama_server_binary, llama_server_version
from generator.servers.process import ManagedServer
from generator.servers.tiny_gguf import tiny_gguf
from generator.sources import pack

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


def first_divergence(a: list, b: list) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def reference_ids(tokenizer, request: dict) -> list[int]:
    return tokenizer.apply_chat_template(
        request["messages"], tools=request.get("tools"), tokenize=True,
        add_generation_prompt=request.get("add_generation_prompt", True), return_dict=False,
        **request.get("chat_template_kwargs", {}),
    )


def vocab_tests(vocab_gguf) -> list[tuple[str, list[int]]]:
    """llama.cpp's tokenizer test vectors: texts split by a separator line, one id line each."""
    raw = open(f"{vocab_gguf}.inp", encoding="utf-8", newline="").read()
    texts = raw.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    lines = open(f"{vocab_gguf}.out", encoding="utf-8").read().splitlines()
    assert len(texts) == len(lines)
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


HTTP = httpx.Client(timeout=30)  # keep-alive: a fresh client per call costs ~80 ms


def server_tokens(url: str, text: str, *, add_special: bool, parse_special: bool, pieces=False):
    reply = HTTP.post(
        f"{url}/tokenize",
        json={"content": text, "add_special": add_special, "parse_special": parse_special,
              "with_pieces": pieces},
    )
    reply.raise_for_status()
    return reply.json()["tokens"]


def chat_template(tokenizer_dir) -> str:
    return json.loads((tokenizer_dir / "tokenizer_config.json").read_text())["chat_template"]


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def llama_source():
    return pack.llama_cpp_source()


@pytest.fixture(scope="session")
def binary():
    return llama_server_binary()


@pytest.fixture(scope="session")
def qwen_dir():
    return pack.npm_models_dir("qwen3")


@pytest.fixture(scope="session")
def qwen_tokenizer(qwen_dir):
    return AutoTokenizer.from_pretrained(qwen_dir)


@pytest.fixture(scope="session")
def qwen_gguf(qwen_dir):
    return tiny_gguf("qwen3", qwen_dir, chat_template(qwen_dir))


@pytest.fixture(scope="session")
def qwen_server(binary, qwen_gguf):
    with LlamaServer(qwen_gguf, binary=binary) as server:
        yield server


@pytest.fixture(scope="session")
def gemma_dir():
    return pack.npm_models_dir("gemma3")


@pytest.fixture(scope="session")
def gemma_tokenizer(gemma_dir):
    return AutoTokenizer.from_pretrained(gemma_dir)


@pytest.fixture(scope="session")
def gemma_server(binary, gemma_dir):
    with LlamaServer(tiny_gguf("gemma3", gemma_dir, chat_template(gemma_dir)), binary=binary) as server:
        yield server


@pytest.fixture(scope="session")
def phi3_server(binary, llama_source):
    template = (llama_source / "models/templates/microsoft-Phi-3.5-mini-instruct.jinja").read_text()
    gguf = tiny_gguf("phi3", None, template, vocab_gguf=llama_source / "models/ggml-vocab-phi-3.gguf")
    with LlamaServer(gguf, binary=binary) as server:
        yield server


# ---------------------------------------------------------------------------------- binary


def test_binary_is_the_pinned_build(binary):
    assert llama_server_version(binary) == pack.LLAMA_CPP_BUILD == 11434


def test_engines_implement_the_protocol(qwen_server):
    assert isinstance(LlamaServerEngine(qwen_server.url), Engine)
    assert isinstance(ClientCompletionEngine(qwen_server.url, str), Engine)


# ---------------------------------------------------------------------------------- Qwen3


def test_qwen3_plain_matches_transformers(qwen_server, qwen_tokenizer):
    request = {"messages": QUESTION}
    expected = reference_ids(qwen_tokenizer, request)
    ids = LlamaServerEngine(qwen_server.url).ids(request)
    assert ids == expected
    assert len(ids) == 25
    assert ids[:9] == [151644, 8948, 198, 2610, 525, 50537, 13, 151645, 198]
    assert ids.prompt.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert ids.pieces[:3] == ["<|im_start|>", "system", "\n"]


def test_qwen3_thinking_off_matches_transformers(qwen_server, qwen_tokenizer):
    request = {"messages": QUESTION, "chat_template_kwargs": {"enable_thinking": False}}
    expected = reference_ids(qwen_tokenizer, request)
    ids = LlamaServerEngine(qwen_server.url).ids(request)
    assert len(expected) == len(ids) == 29
    assert ids == expected
    assert ids[-4:] == [151667, 271, 151668, 271]


def test_qwen3_tool_return_key_is_dropped_by_the_server(qwen_server, qwen_tokenizer):
    schema = get_json_schema(get_weather)
    assert list(schema["function"]) == ["name", "description", "parameters", "return"]
    request = {"messages": QUESTION, "tools": [schema]}
    expected = reference_ids(qwen_tokenizer, request)
    ids = LlamaServerEngine(qwen_server.url).ids(request)
    assert (len(expected), len(ids)) == (177, 168)
    assert first_divergence(expected, ids) == 106
    assert '"return"' not in ids.prompt

    reduced = {"type": "function",
               "function": {k: schema["function"][k] for k in ("name", "description", "parameters")}}
    request = {"messages": QUESTION, "tools": [reduced]}
    assert LlamaServerEngine(qwen_server.url).ids(request) == reference_ids(qwen_tokenizer, request)


def test_parse_special_off_splits_marker_text(qwen_server):
    url = qwen_server.url
    pieces = server_tokens(url, "<|im_start|>", add_special=False, parse_special=False, pieces=True)
    assert [p["piece"] for p in pieces] == ["<", "|", "im", "_start", "|", ">"]
    on = server_tokens(url, "<|im_start|>", add_special=False, parse_special=True)
    assert on == [151644]


def test_qwen3_confirm_counts_golden_tokens_on_real_endpoints(qwen_server, qwen_tokenizer):
    request = {"messages": QUESTION}
    golden = reference_ids(qwen_tokenizer, request)
    served = LlamaServerEngine(qwen_server.url).serve(request, golden)
    assert served.counts == {"/v1/chat/completions usage.prompt_tokens": 25, "/completion tokens_evaluated": 25}
    assert served.ids is None and served.refused is None


def test_qwen3_continue_final_message(qwen_server, qwen_tokenizer):
    messages = [*QUESTION, {"role": "assistant", "content": "The answer is"}]
    request = {"messages": messages, "add_generation_prompt": False, "continue_final_message": True}
    expected = qwen_tokenizer.apply_chat_template(
        messages, tokenize=True, continue_final_message=True, return_dict=False
    )
    ids = LlamaServerEngine(qwen_server.url).ids(request)
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


def test_phi3_tiny_model_carries_the_real_vocab(phi3_server, llama_source):
    props = HTTP.get(f"{phi3_server.url}/props").json()
    template = (llama_source / "models/templates/microsoft-Phi-3.5-mini-instruct.jinja").read_text()
    assert props["chat_template"] == template
    cases = vocab_tests(llama_source / "models/ggml-vocab-phi-3.gguf")
    assert len(cases) == 46
    for text, expected in cases:
        assert server_tokens(phi3_server.url, text, add_special=False, parse_special=False) == expected, text


@pytest.mark.parametrize("which", ["qwen", "gemma"])
def test_tiny_vocab_tokenizes_like_transformers(which, request, llama_source):
    """The converted vocab on llama.cpp's own test texts: same ids as the HF tokenizer."""
    server = request.getfixturevalue(f"{which}_server")
    tokenizer = request.getfixturevalue(f"{which}_tokenizer")
    for text, _ in vocab_tests(llama_source / "models/ggml-vocab-phi-3.gguf"):
        expected = tokenizer.encode(text, add_special_tokens=False)
        assert server_tokens(server.url, text, add_special=False, parse_special=False) == expected, repr(text)


# ---------------------------------------------------------------------------------- faults


def test_stopped_server_is_an_engine_error_naming_the_url(binary, qwen_gguf):
    server = LlamaServer(qwen_gguf, binary=binary).start()
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


def test_http_error_shows_the_server_body(qwen_server):
    with pytest.raises(EngineError) as error:
        LlamaServerEngine(qwen_server.url).ids({"messages": [{"role": "user"}]})
    message = str(error.value)
    assert "HTTP 4" in message or "HTTP 5" in message
    assert "content" in message and qwen_server.url in message


def test_both_generation_flags_are_refused_by_the_server(qwen_server):
    request = {"messages": [*QUESTION, {"role": "assistant", "content": "4"}],
               "add_generation_prompt": True, "continue_final_message": True}
    with pytest.raises(EngineError, match="Cannot set both"):
        LlamaServerEngine(qwen_server.url).ids(request)


def test_render_failure_is_an_engine_error(qwen_server):
    def broken(request):
        raise ValueError("template exploded")

    expected = "client-completion: rendering the prompt failed: template exploded"
    with pytest.raises(EngineError, match=expected):
        ClientCompletionEngine(qwen_server.url, broken).ids({"messages": QUESTION})


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
