"""Engine-side coverage on the real engines: a request that exercises a request-layer branch
the others do not (content as text parts, tool-call arguments as a JSON string, a developer
message, a continued final message) reaches lines of the engine's own request layer that the
rest do not, and so raises the covered lines over a matrix without it. Each engine is the real one: mistral-common and minijinja in this process,
vLLM 0.32.0 in its venv, llama-server b11434's gcov build."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import CONFIG

from generator.cli import main
from generator.coverage import engine_layers as engine

pytestmark = pytest.mark.integration

PLAIN = {"messages": [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "What is 2 + 2?"}]}
PARTS = {"messages": [{"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
                      {"role": "user", "content": [{"type": "text", "text": "What is 2 + 2?"},
                                                   {"type": "text", "text": "Be brief."}]}]}
# an image part: mistral-common's chunk and image paths, which no case of the matrix (text only,
# its dialect cases included) reaches
IMAGE = {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                   {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def tool_call(arguments) -> dict:
    return {"messages": [{"role": "user", "content": "Weather in Paris?"},
                         {"role": "assistant", "content": "", "tool_calls": [
                             {"id": "call_1", "type": "function",
                              "function": {"name": "get_weather", "arguments": arguments}}]},
                         {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}], "tools": TOOLS}


def new_lines(reached: list[set], prefix: str) -> set:
    """What the last body reached in files under `prefix` that none of the others did."""
    others = set().union(*reached[:-1])
    return {key for key in reached[-1] - others if key[0].startswith(prefix)}


def test_mistral_common_text_parts_reach_its_chunk_validation():
    reached = engine.reached("mistral-common", "mistral-nemo", [PLAIN, tool_call({"city": "Paris"}), PARTS], CONFIG)
    assert all(reached), reached
    assert new_lines(reached, "mistral_common/"), "text parts reached no mistral-common line plain text did not"


def test_mistral_common_matrix_coverage_rises_with_an_image_part_body():
    """Text parts no longer raise it: the dialect axis put them in the matrix; an image part does."""
    model = CONFIG.models["mistral-nemo"]
    before = engine.measure("mistral-common", CONFIG, ["mistral-nemo"])
    image = engine._request(model, IMAGE, "image")
    after = engine.measure("mistral-common", CONFIG, ["mistral-nemo"], extra={"mistral-nemo": [image]})
    assert after.requests == before.requests + 1
    assert after.executed > before.executed, (before.executed, after.executed)


def test_mistral_common_start_up_is_measured_again_when_measured_again():
    """The engine's start-up (loading its tekken) runs under coverage each time, not from
    load_tekken's cache: a second measure in one process records it again (module-level lines run
    once per process, at import, so only the first measure has those)."""
    first = engine.measure("mistral-common", CONFIG, ["mistral-nemo"])
    second = engine.measure("mistral-common", CONFIG, ["mistral-nemo"])
    assert second.setup, "the second measure ran no start-up code: its tokenizer came from a cache"
    assert second.setup <= first.setup, sorted(second.setup - first.setup)[:5]
    assert second.executed == first.executed


def test_minijinja_a_refusal_reaches_its_own_template_error_not_the_adaptor():
    """minijinja is measured in its own code: a body the template refuses reaches the package's
    TemplateError; goldens' adaptor is no file of its request layer."""
    refused = {"messages": [{"role": "user", "content": None}]}  # Qwen3's template fails on null content
    reached = engine.reached("minijinja", "qwen3", [PLAIN, refused], CONFIG)
    assert not reached[0], reached[0]
    assert {path for path, _ in reached[1]} == {"minijinja/__init__.py"}, reached[1]


def test_vllm_string_arguments_and_a_developer_message_reach_its_parser():
    from generator.engines.vllm import coverage as vllm_server

    developer = {"messages": [{"role": "developer", "content": "Answer in French."},
                              {"role": "user", "content": "Hello!"}]}
    bodies = [PLAIN, tool_call({"city": "Paris"}), developer, tool_call(json.dumps({"city": "Paris"}))]
    reached = engine.reached("vllm", "qwen3", bodies, CONFIG)
    assert all(reached), "a request reached nothing of vLLM's request layer"
    path = vllm_server.vllm_site(vllm_server.version(CONFIG)) / "vllm/renderers/chat_utils.py"
    source = path.read_text().splitlines()

    def text(keys):
        return {source[line - 1].strip() for file, line in keys if file == "vllm/renderers/chat_utils.py"}

    # string arguments are parsed back into an object; object arguments never reach the parse
    assert "parsed = json.loads(content)" in text(new_lines(reached, "vllm/renderers/chat_utils.py"))
    # a developer message keeps its own tools field; no other role takes that line
    assert 'result_msg["tools"] = message.get("tools", None)' in text(
        new_lines(reached[:3], "vllm/renderers/chat_utils.py"))


def test_llama_server_text_parts_reach_its_oaicompat_parsing():
    reached = engine.reached("llama-server", "qwen3", [PLAIN, PARTS], CONFIG)
    assert all(reached)
    assert new_lines(reached, "common/chat.cpp") | new_lines(reached, "tools/server/"), reached[1] - reached[0]


def test_the_command_writes_json_and_a_markdown_report(tmp_path):
    report = tmp_path / "engine.md"
    result = CliRunner().invoke(main, ["coverage", "--engine", "mistral-common", "--json", "--report", str(report)])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)["engines"]["mistral-common"]
    assert record["models"] == ["mistral-nemo"] and 0 < record["executed"] < record["executable"]
    spans = record["files"]["mistral_common/protocol/instruct/validator.py"]["never_executed"]
    assert spans and all(set(s) == {"lines", "function", "text", "partly"} for s in spans)
    text = report.read_text()
    assert "| `mistral_common/protocol/instruct/validator.py` |" in text and "```python" in text


def test_search_keeps_a_variation_for_the_engine_lines_it_alone_reaches():
    from conftest import source_of

    from generator.coverage import search

    model = CONFIG.models["mistral-nemo"]
    catalogue = {"image": IMAGE, "plain": PLAIN}  # neither reaches template code the matrix does not
    template_only = search.search(model, source_of("mistral-nemo"), CONFIG, catalogue, prefix="t-")
    assert template_only.kept == []
    with_engine = search.search(model, source_of("mistral-nemo"), CONFIG, catalogue, prefix="t-",
                                engines=("mistral-common",))
    assert [candidate.name for candidate, _ in with_engine.kept] == ["t-image"]
    before, after = with_engine.engines["mistral-common"]
    assert after.executed > before.executed
