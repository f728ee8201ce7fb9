"""vLLM against Transformers, on vLLM's weightless render server (CPU build, no weights).

The render server gets the real Qwen3 tokenizer and the exact chat template, so every difference
from Transformers is vLLM's own request handling. It is the session's qwen3 vLLM (conftest.py),
the one every replay of the matrix uses. One real serving vLLM (tiny random-weight Qwen3) starts
in the whole suite, here, to confirm the render endpoint feeds what serving feeds the model.
First run installs vLLM into the cache (~1-4 min); later runs start a render server in ~40 s.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import (CONFIG, GOLDENS, ROOT, asked_count, engine_of, golden_of, render_count, server_of, source_of, tier,
                      tokenizer_of)
from transformers.utils import get_json_schema

from generator import http
from generator.engines import EngineError
from generator.engines.vllm.engine import RENDER, VllmEngine, render_options
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging import causes
from generator.servers.process import free_port
from generator.engines.vllm.tiny_model import tiny_hf_model
from generator.engines.vllm.server import RENDER_ENTRY, VllmServer, render_command, render_model_dir, vllm_python

# the tests of the session's qwen3 vLLM render server, run together while it is up
ON_QWEN3_VLLM = [pytest.mark.integration, pytest.mark.server("vllm", "qwen3")]


def on_qwen3_vllm(test):
    for mark in reversed(ON_QWEN3_VLLM):
        test = mark(test)
    return test


THINK_OFF_TAIL = [151667, 271, 151668, 271]  # "<think>", "\n\n", "</think>", "\n\n"


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city name.
    """
    return city


WEATHER_TOOL = get_json_schema(get_weather)
PLAIN = {"messages": [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2 + 2?"},
]}
THINK_OFF = {**PLAIN, "chat_template_kwargs": {"enable_thinking": False}}
TOOLS = {**PLAIN, "tools": [WEATHER_TOOL]}
CONTINUE = {
    "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}],
    "add_generation_prompt": False, "continue_final_message": True,
}
ALL = {"plain": PLAIN, "think_off": THINK_OFF, "tools": TOOLS, "continue": CONTINUE}


@pytest.fixture(scope="session")
def qwen3_model():
    """The tiny model the session's qwen3 vLLM server runs (the same inputs, the same cached dir)."""
    source = source_of("qwen3")
    return tiny_hf_model("qwen3", source.tokenizer_dir, source.template)


@pytest.fixture(scope="session")
def reference():
    return tokenizer_of("qwen3")


def render(tokenizer, request) -> list[int]:
    """Transformers' ids for a request: the reference every engine is held to."""
    return tokenizer.apply_chat_template(
        request["messages"], tools=request.get("tools"), tokenize=True, return_dict=False,
        add_generation_prompt=request.get("add_generation_prompt", True),
        continue_final_message=request.get("continue_final_message", False),
        **request.get("chat_template_kwargs", {}),
    )


@pytest.fixture
@tier(pytest.mark.integration)  # vLLM's render server from its own venv
def vllm(pool):
    return engine_of(pool, "vllm", "qwen3")


@on_qwen3_vllm
def test_plain_chat_matches_transformers(vllm, reference):
    ids = vllm.ids(PLAIN)
    assert vllm.render and len(ids) == 25
    assert ids == render(reference, PLAIN)
    assert ids.pieces is None  # the render endpoint answers ids only


@on_qwen3_vllm
def test_enable_thinking_false_reaches_the_template(vllm, reference):
    ids = vllm.ids(THINK_OFF)
    assert len(ids) == 29
    assert ids[-4:] == THINK_OFF_TAIL
    assert ids == render(reference, THINK_OFF)


@on_qwen3_vllm
def test_tools_lose_the_return_key(vllm, reference):
    """vLLM parses tools into its FunctionDefinition model, which keeps only name, description,
    parameters (and strict); get_json_schema's "return" entry is dropped before rendering."""
    assert "return" in WEATHER_TOOL["function"]
    expected = render(reference, TOOLS)
    without_return = {"type": "function", "function": {
        k: v for k, v in WEATHER_TOOL["function"].items() if k != "return"
    }}
    ids = vllm.ids(TOOLS)
    assert (len(expected), len(ids)) == (177, 168)
    assert next(i for i, (a, b) in enumerate(zip(expected, ids)) if a != b) == 106
    assert ids == render(reference, {**TOOLS, "tools": [without_return]})


@on_qwen3_vllm
def test_continue_final_message_matches_transformers(vllm, reference):
    ids = vllm.ids(CONTINUE)
    assert ids == render(reference, CONTINUE)
    assert reference.decode(ids[-1:]) == "Hel"


@on_qwen3_vllm
def test_render_ids_are_what_serving_feeds_the_model(vllm, vllm_serving):
    """Every qwen3 golden's request and the cases above: the render server's ids are exactly the
    prompt_token_ids the serving server's /v1/chat/completions fed the model (or both refuse),
    and its /tokenize says the same where it renders the same (it drops reasoning_content)."""
    serving = VllmEngine(vllm_serving.url, vllm_serving.model_name)
    assert serving.version() == vllm.version() == "0.32.0"
    requests = {**{f"extra/{case}": request for case, request in ALL.items()},
                **{path.stem: golden_file.read(path).request
                          for path in sorted((GOLDENS / "qwen3").glob("*.json")) if path.name.count(".") == 1}}
    refused = {}
    for case, request in requests.items():
        served = serving.serve(request)
        try:
            got = vllm.ids(request)
        except EngineError as error:
            assert served.refused is not None, (case, str(error))
            refused[case] = str(error)
            continue
        assert served.refused is None, case
        assert list(got) == list(served.ids), case
    # each refusal is one the committed ledger reviewed for vLLM (HTTP 400: object arguments, a
    # json_schema response_format without its name, `name: null`, `tools: []`): an entry of its own
    # or a refusal cause, or the one the reference makes too (Mistral's thinking chunk on Qwen3)
    recorded = {path.name.split(".")[0] for path in (GOLDENS / "qwen3").glob("*.vllm.json")
                if golden_file.read(path).outcome == "error"}
    refusing = [c for c in causes.covering(GOLDENS, "vllm", "qwen3") if c.refusal]
    goldens = sum(1 for path in (GOLDENS / "qwen3").glob("*.json") if path.name.count(".") == 1)
    assert len(requests) == len(ALL) + goldens and recorded <= set(refused), refused
    unexplained = [case for case, said in refused.items() if case not in recorded | {"reasoning-history_think-chunk"}
                   and not (not case.startswith("extra/")
                            and any(c.explains_refusal(said, golden_of(f"qwen3/{case}")) for c in refusing))]
    assert not unexplained and len(refused) > len(recorded), unexplained
    served = serving.serve(TOOLS).ids
    assert '"get_weather"' in served.prompt and '"return"' not in served.prompt


@on_qwen3_vllm
def test_http_error_carries_status_and_body(vllm):
    wrong = VllmEngine(vllm.url, "no-such-model", render=True)
    with pytest.raises(EngineError, match=r"vllm at http://127\.0\.0\.1:\d+/v1/chat/completions/render: HTTP 404.*no-such-model"):
        wrong.ids(PLAIN)
    both = {**CONTINUE, "add_generation_prompt": True}
    with pytest.raises(EngineError, match=r"HTTP 400.*continue_final_message"):
        vllm.ids(both)


def test_nothing_listening_names_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(EngineError, match=rf"vllm at {url}/tokenize: connection failed \(Connection refused\)"):
        VllmEngine(url, "m").ids(PLAIN)


def test_no_answer_is_a_timeout():
    """A socket that accepts connections (backlog) but never replies."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(EngineError, match=rf"vllm at {url}/tokenize: timed out"):
            VllmEngine(url, "m", transport=http.DEFAULT.with_timeout(0.5)).ids(PLAIN)


@pytest.fixture
def broken_server():
    """A real HTTP server standing in for a misbehaving engine: replies that a healthy vLLM
    never sends, so the engine's reply checks can be exercised over a real socket."""
    replies = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = replies["body"]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", replies
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("body, message", [
    (b"<html>oops</html>", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"tokens": [1, "2"]}', "token 1 is '2'"),
    (b'{"tokens": [1, true]}', "token 1 is True"),
    (b'{"tokens": null}', "expected a list"),
    (b'{"tokens": [1, 2], "token_strs": ["a"]}', "token_strs does not match"),
])
def test_malformed_replies_are_engine_errors(broken_server, body, message):
    url, replies = broken_server
    replies["body"] = body
    with VllmEngine(url, "m") as engine, pytest.raises(EngineError, match=f"vllm at {url}") as error:
        engine.ids(PLAIN)
    assert message in str(error.value)


@pytest.mark.slow
def test_tiny_model_is_deterministic_and_carries_the_template(tmp_path, monkeypatch, qwen3_model):
    tokenizer_dir = source_of("qwen3").tokenizer_dir
    template = (qwen3_model / "chat_template.jinja").read_text()
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))
    again = tiny_hf_model("qwen3", tokenizer_dir, template)
    assert again != qwen3_model and again.name == qwen3_model.name  # same key, other cache
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (again / name).read_bytes() == (qwen3_model / name).read_bytes(), name
    config = json.loads((again / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["vocab_size"] == len(tokenizer_of("qwen3")) == 151669
    assert json.loads((again / "tokenizer_config.json").read_text())["chat_template"] == template
    other = tiny_hf_model("qwen3", tokenizer_dir, template + "\n")
    assert other != again and (other / "chat_template.jinja").read_text() == template + "\n"


@pytest.mark.integration
def test_failed_venv_install_leaves_nothing_marked_complete(tmp_path, monkeypatch):
    """A torch version no index has: pip fails fast, the error is one line, the half venv is gone."""
    from generator.servers import venv

    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))
    plan = lambda: [("install torch==0.0.0", venv.INSTALL, ["torch==0.0.0"])]  # noqa: E731
    with pytest.raises(GoldensError, match=r"vllm-cpu-x venv: install torch==0\.0\.0 failed") as error:
        venv.ensure("vllm-cpu-x", plan, "print(1)", "1")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "vllm-cpu-x").exists()


@pytest.fixture(scope="module")
def gemma3_vision_model():
    """The tiny Gemma3ForConditionalGeneration built from gemma3's tokenizer and processor."""
    from conftest import source_of

    source = source_of("gemma3")
    return tiny_hf_model("gemma3-vision", source.processor_dir, source.template,
                         architecture="Gemma3ForConditionalGeneration")


@pytest.mark.integration
def test_tiny_gemma3_vision_model_is_what_transformers_builds(gemma3_vision_model):
    """Transformers' own Gemma3ForConditionalGeneration (torch, in the vLLM venv) loads every
    weight of the tiny model by name and shape and runs a forward pass over an image's 256
    soft tokens: the model vLLM would serve is well formed."""
    import subprocess

    script = (
        "import sys, torch\n"
        "from transformers import AutoConfig, Gemma3ForConditionalGeneration\n"
        "from safetensors.torch import load_file\n"
        "d = sys.argv[1]\n"
        "model = Gemma3ForConditionalGeneration(AutoConfig.from_pretrained(d))\n"
        "missing, unexpected = model.load_state_dict(load_file(d + '/model.safetensors'), strict=False)\n"
        "assert missing == ['lm_head.weight'] and not unexpected, (missing, unexpected)\n"
        "ids = torch.tensor([[2, 105, 2364, 109, 255999] + [262144] * 256 + [256000, 108]])\n"
        "out = model(input_ids=ids, pixel_values=torch.zeros(1, 3, 896, 896), token_type_ids=(ids == 262144).long())\n"
        "print(tuple(out.logits.shape))\n"
    )
    result = subprocess.run([str(vllm_python()), "-c", script, str(gemma3_vision_model)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "(1, 263, 262145)"


@pytest.mark.integration
def test_gemma3_vision_model_needs_torchvision(gemma3_vision_model):
    """Why vLLM replays the image goldens on a text model and records a refusal: its Gemma 3
    vision path imports Transformers' torchvision image processor, and torchvision is not in
    the vLLM venv (PyPI's builds link CUDA torch). The render server (what every replay starts)
    inspects the architecture as serving does and fails the same way, so no serving start is
    needed to show it. When this starts passing the other way,
    serve the vision model and re-review the gemma3/image-expanded vLLM ledger entries."""
    with pytest.raises(GoldensError, match="exited with code 1 before becoming healthy") as error:
        VllmServer(gemma3_vision_model, served_model_name="gemma3", render_only=True).start()
    log = str(error.value)
    assert "Model architectures ['Gemma3ForConditionalGeneration'] failed to be inspected" in log
    path = log.split("log ", 1)[1].split(",", 1)[0]
    text = open(path, encoding="utf-8", errors="replace").read()
    assert "from torchvision.transforms.v2 import functional as tvF" in text
    assert "ModuleNotFoundError: No module named 'torchvision'" in text


# ------------------------------------------------------------------ the render server per model

def _argv(model: str) -> tuple[list[str], dict[str, str], Path]:
    """The render server's command line and environment for a matrix model (nothing started:
    the project's python stands in for the vLLM venv's)."""
    spec, source = CONFIG.models[model], source_of(model)
    directory = render_model_dir(model, source.tokenizer_dir, source.template, **render_options(spec, source))
    server = VllmServer(directory, served_model_name=model, render_only=True, python=Path(sys.executable),
                        date="2026-01-15")
    return server.argv, server.env, directory


def test_mistral_nemo_renders_with_mistral_common_and_no_template():
    argv, _, directory = _argv("mistral-nemo")
    assert argv[1:3] == ["-m", RENDER_ENTRY] or argv[3:5] == ["launch", "render"]
    assert argv[argv.index("--tokenizer-mode") + 1] == "mistral" and "--chat-template" not in argv
    assert (directory / "tekken.json").read_bytes() == source_of("mistral-nemo").tekken.read_bytes()
    assert json.loads((directory / "config.json").read_text())["model_type"] == "mistral"


def test_gpt_oss_is_a_gpt_oss_model_with_the_matrix_date():
    argv, env, directory = _argv("gpt-oss")
    config = json.loads((directory / "config.json").read_text())
    assert (config["model_type"], config["architectures"]) == ("gpt_oss", ["GptOssForCausalLM"])
    assert env["VLLM_SYSTEM_START_DATE"] == "2026-01-15" and "--tokenizer-mode" not in argv


def test_every_other_model_renders_its_template_and_has_no_weights():
    for model in ("qwen3", "gemma3", "llama3", "phi3.5", "deepseek-v3", "gemma4", "command-r"):
        argv, _, directory = _argv(model)
        template = Path(argv[argv.index("--chat-template") + 1])
        assert template.read_text() == source_of(model).template, model
        assert not list(directory.glob("*.safetensors")), model
    assert json.loads((_argv("deepseek-v3")[2] / "config.json").read_text())["model_type"] == "deepseek_v3"


def test_a_release_without_the_render_module_launches_render(tmp_path):
    """vllm-cpu 0.25.0 has no vllm/entrypoints/launchers/render; its render server is the
    `vllm launch render` subcommand (the module came later, 0.31.0 has it)."""
    python = tmp_path / "bin" / "python"
    command = render_command(python)
    assert command[:2] == [python, "-c"] and command[3:] == ["launch", "render"]
    assert "from vllm.entrypoints.cli.main import main" in command[2]
    entry = tmp_path / "lib" / "python3.11" / "site-packages" / "vllm" / "entrypoints" / "launchers" / "render"
    entry.mkdir(parents=True)
    (entry / "entry.py").write_text("")
    assert render_command(python) == [python, "-m", RENDER_ENTRY]


@pytest.mark.parametrize("body, message", [
    (b'{"token_ids": [1, "2"]}', "token 1 is '2'"),
    (b'{"tokens": [1, 2]}', "expected a list"),
])
def test_malformed_render_replies_are_engine_errors(broken_server, body, message):
    url, replies = broken_server
    replies["body"] = body
    with VllmEngine(url, "m", render=True) as engine, pytest.raises(EngineError, match=f"vllm at {url}{RENDER}") as error:
        engine.ids(PLAIN)
    assert message in str(error.value)


# ------------------------------------------------------------------ releases

@pytest.mark.integration
def test_bisect_runs_over_two_releases_of_render_servers():
    """vllm@0.31.0 is the suite's one extra release: its venv installs once (uv, ~30 s warm),
    then bisect starts one render server per release."""
    from click.testing import CliRunner

    from generator.cli import main

    result = CliRunner().invoke(main, ["bisect", "--config", str(ROOT / "models.yaml"), "--engine", "vllm",
                                       "--good", "0.31.0", "--bad", "0.32.0", "--model", "qwen3"])
    assert result.exit_code == 1, result.output
    assert f"0.31.0 and 0.32.0 agree on all {asked_count('vllm', 'qwen3')} case(s)" in result.stdout


# ------------------------------------------------------------------ native tokenizer modes

# vLLM serves DeepSeek-V4 and Kimi-K3 through the tokenizer mode their architecture selects
# (generator/engines/vllm/engine.py NATIVE_MODES), not the HF renderer the tiny llama model dir would get

@pytest.mark.integration
@pytest.mark.server("vllm", "deepseek-v4")
def test_deepseek_v4_renders_through_vllms_encoder_not_the_template(pool):
    """The render server runs --tokenizer-mode deepseek_v4, and gives on a reviewed dispute the
    ids only DeepSeek's encoder gives (the max-effort paragraph), not the template's."""
    engine = engine_of(pool, "vllm", "deepseek-v4")
    argv = server_of(pool, "vllm", "deepseek-v4").argv
    assert argv[argv.index("--tokenizer-mode") + 1] == "deepseek_v4"
    golden = golden_of("deepseek-v4/effort-max--thinking")
    encoder = [token[0] for token in golden.extra["disputed"]["encoder"]["tokens"]]
    assert encoder != golden.ids  # the template (the golden's tokens) writes another paragraph
    assert list(engine.ids(golden.request)) == encoder


@pytest.mark.integration
@pytest.mark.server("vllm", "kimi-k3")
def test_kimi_k3_renders_through_vllms_k3_renderer(pool):
    """The render server runs --tokenizer-mode kimi_k3, whose renderer maps reasoning_effort onto
    K3's thinking_effort and refuses an effort K3 has not (the HF renderer would render it)."""
    engine = engine_of(pool, "vllm", "kimi-k3")
    argv = server_of(pool, "vllm", "kimi-k3").argv
    assert argv[argv.index("--tokenizer-mode") + 1] == "kimi_k3"
    request = {**golden_of("kimi-k3/plain").request, "reasoning_effort": "medium"}
    with pytest.raises(EngineError, match="Kimi K3 supports thinking_effort values"):
        engine.ids(request)
