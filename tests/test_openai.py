"""The openai engine against the real llama-server and the real vLLM, through their OpenAI
/v1/chat/completions endpoints, the way a user gates a server with `goldens check --url`.

vLLM returns the prompt's token ids (`return_token_ids`), so it is judged token by token.
llama-server b11434 returns no prompt ids on that endpoint (its `return_tokens` is the generated
tokens, `verbose` adds the prompt text only), so it is judged from usage.prompt_tokens, and
every report says so. The llama-server here requires an API key (--api-key-file, so the key is
on no command line); the key must appear in no output, report or log.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDENS, ROOT, refusal_count, render_count, tier

from generator.cli import main
from generator.engines import EngineError, Ids, PromptCount
from generator.engines.openai.engine import OpenAIEngine
from generator.engines.remote import Connection
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging.judge import judge
from generator.replay.judging.recording import record
from generator.engines.llama_server.llama_cpp import LlamaServer
from generator.engines.llama_server.tiny_gguf import tiny_gguf
from generator.sources import pack

KEY = "sk-goldens-llama-7c1d2e3f4a5b6c7d"
ENV = {"GOLDENS_TEST_KEY": KEY}


def qwen3_template() -> str:
    return json.loads((pack.npm_models_dir("qwen3") / "tokenizer_config.json").read_text())["chat_template"]


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # a llama-server started
def llama(tmp_path_factory):
    """llama-server on the tiny Qwen3 GGUF, accepting only KEY."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(KEY + "\n")
    gguf = tiny_gguf("qwen3", pack.npm_models_dir("qwen3"), qwen3_template())
    with LlamaServer(gguf, extra_args=["--api-key-file", str(keys)]) as server:
        yield server


@pytest.fixture
def vllm(vllm_serving):
    """The suite's one serving vLLM on the tiny Qwen3 model (conftest.py; the pool's vLLM is a
    render server, which has no /v1/chat/completions)."""
    return vllm_serving


def golden(case: str, root: Path = GOLDENS) -> golden_file.Golden:
    return golden_file.read(golden_file.golden_path(root, case))


def check(url: str, tmp_path: Path, *args, env=None, root: Path = GOLDENS):
    return CliRunner().invoke(main, [str(a) for a in (
        "check", "--config", ROOT / "models.yaml", "--goldens", root, "--engine", "openai",
        "--url", f"openai={url}", "--junit", tmp_path / "out.xml", "--report", tmp_path / "out.md", *args)], env=env)


# ------------------------------------------------------------------------------ llama-server


@pytest.mark.integration
def test_llama_server_gives_a_count(llama):
    engine = OpenAIEngine(llama.url, "any", Connection(api_key=KEY))
    count = engine.ids(golden("qwen3/plain").request)
    assert isinstance(count, PromptCount) and (count.tokens, count.field) == (25, "usage.prompt_tokens")
    assert engine.flags  # llama-server ignores the id flags rather than rejecting them


@pytest.mark.integration
def test_llama_server_through_check_is_count_level_everywhere(llama, tmp_path):
    result = check(llama.url, tmp_path, "--model", "qwen3", "--api-key-env", "GOLDENS_TEST_KEY", env=ENV)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    drifts = sorted(line for line in result.stdout.splitlines() if line.startswith("DRIFT"))
    counted = [line for line in drifts if ": count only: " in line]
    assert counted == [
        "DRIFT qwen3/control-text [openai]: count only: usage.prompt_tokens 58, 1 token shorter than the golden's 59",
        ("DRIFT qwen3/control-text--thinking-off [openai]: count only: usage.prompt_tokens 62, "
         "1 token shorter than the golden's 63"),
        "DRIFT qwen3/plain_ends-assistant [openai]: count only: usage.prompt_tokens 31, 5 tokens shorter than the golden's 36",
        "DRIFT qwen3/tools [openai]: count only: usage.prompt_tokens 168, 9 tokens shorter than the golden's 177",
        ("DRIFT qwen3/tools--thinking-off [openai]: count only: usage.prompt_tokens 172, "
         "9 tokens shorter than the golden's 181"),
        "DRIFT qwen3/tools-reduced_key-order [openai]: count only: usage.prompt_tokens 232, 2 tokens longer than the golden's 230",
        "DRIFT qwen3/tools-reduced_no-params [openai]: count only: usage.prompt_tokens 179, 5 tokens longer than the golden's 174",
        "DRIFT qwen3/tools-reduced_strict [openai]: count only: usage.prompt_tokens 270, 8 tokens shorter than the golden's 278",
    ]
    # llama-server's request layer refuses eight dialect cases (HTTP 400, or 500 for what its JSON
    # parsing throws on: null names, "" or non-JSON arguments, a tool without type)
    refused = [("multi-turn_null-fields", "HTTP 500", "type must be string, but is null"),
               ("plain_two-assistants", "HTTP 400", "Cannot have 2 or more assistant messages at the end of the list."),
               ("tool-result-json-args_ends-call", "HTTP 400", "Cannot continue an assistant message that contains tool calls."),
               ("tool-result_args-empty", "HTTP 500", "Failed to parse tool call arguments as JSON"),
               ("tool-result_args-invalid", "HTTP 500", "Failed to parse tool call arguments as JSON"),
               ("tools-reduced_tool-choice-bare", "HTTP 400", "Invalid tool_choice: get_weather"),
               ("tools-reduced_tool-no-type", "HTTP 500", "Missing tool type"),
               ("tools-reduced_type-int", "HTTP 400", "unrecognized type int")]
    others = [line for line in drifts if line not in counted]
    for line, (case, status, message) in zip(others, refused, strict=True):
        assert line.startswith(f"DRIFT qwen3/{case} [openai]: engine refused: ") and status in line and message in line, line
    # every case the server counted and nobody refused matches in length: counts only, no match
    cases, both, drift = render_count("qwen3"), refusal_count("qwen3"), len(drifts)
    counted_only = cases - both - drift
    assert result.stdout.splitlines()[-1] == (
        f"{cases} checked: 0 rendered and match, {both} both refuse, 0 known divergence, {drift} drift, 0 error, "
        f"{counted_only} length only (count only, ids not seen)")
    markdown = (tmp_path / "out.md").read_text()
    assert f"**goldens check: failed ({drift} drift)** · {cases} checked: 0 rendered and match" in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| qwen3 ")]
    assert len(rows) == cases and not [row for row in rows if " ok " in row]
    assert sum("length matches (count only)" in row for row in rows) == counted_only
    assert "qwen3/tools · openai: drift (count only)" in markdown
    xml = (tmp_path / "out.xml").read_text()
    no_count = len(refused) + both  # the refusals above and the ones both make are no count
    assert f'<property name="count_only" value="{cases - no_count}" />' in xml
    assert 'message="drift: count only: usage.prompt_tokens 168, 9 tokens shorter than the golden\'s 177"' in xml
    # the key: in nothing goldens printed or wrote, nor in the server's log
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 2
    for text in [result.stdout, result.stderr, *written, llama.log_path.read_text(errors="replace")]:
        assert KEY not in text


@pytest.mark.integration
def test_llama_server_without_the_key_is_one_line_exit_2(llama, tmp_path):
    result = check(llama.url, tmp_path, "--model", "qwen3")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.splitlines() == [(f"goldens: error: [openai] openai unavailable for qwen3: openai at "
                                           f"{llama.url}/v1/models: HTTP 401: "
                                           '{"error":{"message":"Invalid API Key","type":"authentication_error",'
                                           f'"code":401}}}} ({render_count("qwen3")} cases, from qwen3/plain)')]
    assert f"{render_count('qwen3')} error" in (tmp_path / "out.md").read_text()


@pytest.mark.integration
def test_llama_server_with_the_key_in_another_header(llama, tmp_path):
    """--header for auth that is not a Bearer token (llama-server also reads X-Api-Key)."""
    result = check(llama.url, tmp_path, "--served-model", "qwen3=tiny", "--header", f"X-Api-Key: {KEY}")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    cases, both, drift = render_count("qwen3"), refusal_count("qwen3"), 16  # as with the Bearer key above
    assert result.stdout.splitlines()[-1].endswith(
        f"{drift} drift, 0 error, {cases - both - drift} length only (count only, ids not seen)")
    for text in [result.stdout, result.stderr, (tmp_path / "out.md").read_text(), (tmp_path / "out.xml").read_text()]:
        assert KEY not in text


@pytest.mark.integration
def test_a_count_cannot_be_recorded_as_a_ledger_entry(llama, tmp_path):
    engine = OpenAIEngine(llama.url, "any", Connection(api_key=KEY))
    with pytest.raises(GoldensError, match=r"^qwen3/tools: openai reports only a prompt token count; "
                                           r"there are no ids to record$"):
        record(engine, golden("qwen3/tools"), tmp_path, "the return key is dropped")
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------------------------- vLLM


@pytest.mark.integration
def test_vllm_gives_the_prompt_ids(vllm):
    engine = OpenAIEngine(vllm.url + "/v1", vllm.model_name)
    item = golden("qwen3/plain")
    ids = engine.ids(item.request)
    assert isinstance(ids, Ids) and ids == item.ids and ids.prompt == item.prompt


@pytest.mark.integration
def test_vllm_through_check_is_token_level(vllm, tmp_path):
    result = check(vllm.url + "/v1", tmp_path, "--served-model", f"qwen3={vllm.model_name}")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    out = result.stdout
    cases, both, drift = render_count("qwen3"), refusal_count("qwen3"), 17  # the refusals below and the tools drifts
    assert out.splitlines()[-1] == (f"{cases} checked: {cases - both - drift} rendered and match, {both} both refuse, "
                                    f"0 known divergence, {drift} drift, 0 error"), out
    assert "DRIFT qwen3/tools [openai]: drift at token 106 (177 vs 168 tokens)" in out
    assert "count only" not in out
    refused = [line for line in out.splitlines() if "engine refused" in line]
    assert sorted(line.split(" [")[0] for line in refused) == [  # object arguments: the OpenAI schema's 400
        "DRIFT qwen3/multi-turn_null-fields",  # null message fields: `name` must be a string, 400
        "DRIFT qwen3/parallel-tool-calls", "DRIFT qwen3/parallel-tool-calls--thinking-off",
        "DRIFT qwen3/plain_response-format-no-name",  # json_schema without its required name: 400 too
        "DRIFT qwen3/plain_tools-empty",  # `tools` must not be an empty array: 400
        "DRIFT qwen3/tool-result", "DRIFT qwen3/tool-result--thinking-off",
        "DRIFT qwen3/tool-result_content-empty-list", "DRIFT qwen3/tool-result_content-missing",
        "DRIFT qwen3/tool-result_content-null", "DRIFT qwen3/tool-result_tool-parts",
        "DRIFT qwen3/tools-reduced_tool-choice-bare"]  # a bare tool name as tool_choice: 400
    markdown = (tmp_path / "out.md").read_text()
    assert "count only" not in markdown and "**drift at token 106**" in markdown
    assert "count_only" not in (tmp_path / "out.xml").read_text()


@pytest.mark.integration
def test_a_ledger_entry_from_vllm_ids_judges_llama_servers_count(vllm, llama, tmp_path):
    """Recorded at token level on vLLM, the reviewed divergence (168 tokens) is then met by
    llama-server's count: a known divergence, marked count only."""
    root = tmp_path / "goldens"
    shutil.copytree(GOLDENS / "qwen3", root / "qwen3")
    result = CliRunner().invoke(main, ["ledger", "--config", str(ROOT / "models.yaml"), "--goldens", str(root),
                                       "--engine", "openai", "--case", "qwen3/tools", "--url", vllm.url,
                                       "--reason", "tools keep only name, description and parameters"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    entry = golden_file.read(root / "qwen3" / "tools.openai.json")
    assert len(entry.ids) == 168 and entry.extra["diverges_at"] == 106
    outcome = judge(OpenAIEngine(llama.url, "any", Connection(api_key=KEY)), golden("qwen3/tools"), root)
    assert (outcome.status, outcome.level, outcome.reason) == (
        "known", "count", "tools keep only name, description and parameters"), outcome.detail
    again = judge(OpenAIEngine(vllm.url, vllm.model_name), golden("qwen3/tools"), root)
    assert (again.status, again.level) == ("known", "ids")


# ------------------------------------------------------- servers that cannot run here, stood in


def openai_reply(body: dict, **extra) -> tuple[int, bytes, dict]:
    reply = {"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
             "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "length"}],
             "usage": {"prompt_tokens": 25, "completion_tokens": 1, "total_tokens": 26}, **extra}
    return 200, json.dumps(reply).encode(), {}


@pytest.fixture
def stand_in():
    """test_ollama's stand-in, in this process: the engine reaches it through its transport."""
    from test_ollama import StandIn

    return StandIn(listen=False)


def test_a_server_that_rejects_unknown_fields_gets_plain_requests(stand_in):
    """OpenAI's own API answers 400 to a field it does not know: the id flags are dropped once,
    the request is sent again, and the verdict is count level."""
    def strict(body):
        unknown = [key for key in ("return_token_ids", "return_prompt_token_ids", "return_prompt_text") if key in body]
        if unknown:
            message = f"Unrecognized request argument supplied: {unknown[0]}"
            return 400, json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode(), {}
        return openai_reply(body)

    stand_in.reply = strict
    engine = OpenAIEngine(stand_in.url + "/v1", "gpt-x", Connection(api_key=KEY), stand_in.transport)
    first = engine.ids(golden("qwen3/plain").request)
    second = engine.ids(golden("qwen3/plain").request)
    assert isinstance(first, PromptCount) and first.tokens == second.tokens == 25
    assert len(stand_in.bodies) == 3 and engine.flags == {}
    plain = stand_in.bodies[-1]
    assert plain == {"model": "gpt-x", "messages": golden("qwen3/plain").request["messages"],
                     "max_tokens": 1, "temperature": 0, "stream": False}
    assert set(stand_in.auth) == {f"Bearer {KEY}"}


def test_sglang_returns_the_ids_in_its_choice(stand_in):
    item = golden("qwen3/plain")
    stand_in.reply = lambda body: openai_reply(body, choices=[{
        "index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "length",
        "prompt_token_ids": item.ids}]) if body.get("return_prompt_token_ids") else None
    ids = OpenAIEngine(stand_in.url, "qwen", transport=stand_in.transport).ids(item.request)
    assert isinstance(ids, Ids) and ids == item.ids


@pytest.mark.parametrize("extra, message", [
    ({"usage": None}, "reply has neither prompt_token_ids nor usage.prompt_tokens"),
    ({"usage": {"prompt_tokens": "25"}}, "usage.prompt_tokens is '25' (str), not a token count"),
    ({"usage": {"prompt_tokens": 25.0}}, "usage.prompt_tokens is 25.0 (float)"),
    ({"prompt_token_ids": [1, "2"]}, "token 1 is '2' (str), not an int"),
    ({"prompt_token_ids": {"a": 1}}, "expected a list of token ids, got dict"),
])
def test_malformed_openai_replies_are_one_line_engine_errors(stand_in, extra, message):
    stand_in.reply = lambda body: openai_reply(body, **extra)
    with pytest.raises(EngineError) as error:
        OpenAIEngine(stand_in.url, "m", transport=stand_in.transport).ids(golden("qwen3/plain").request)
    assert str(error.value).startswith(f"openai at {stand_in.url}/v1/chat/completions")
    assert message in str(error.value) and "\n" not in str(error.value)
