"""Shapes inside a template's capabilities (#31 item 2): the probe, the lock, the polyfilled
forms beside the refusal goldens, and the note on cases whose ids another case already renders.
All in-process: the reference and minijinja."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT, one_line_error, source_of

from generator.analysis import capabilities
from generator.cli import main
from generator.config import polyfill
from generator.config.cases import model_cases
from generator.goldens import golden_file, review


def run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


@pytest.mark.parametrize(("model", "expected"), [
    ("qwen3", dict.fromkeys(polyfill.CAPABILITIES, "yes")),
    ("gemma3", {"system_role": "yes", "tools": "ignored", "tool_calls": "ignored", "tool_responses": "refused",
                "parallel_tool_calls": "ignored"}),
    ("llama3", {"system_role": "yes", "tools": "yes", "tool_calls": "yes", "tool_responses": "yes",
                "parallel_tool_calls": "refused"}),
])
@pytest.mark.slow
def test_the_probe_names_what_each_template_takes(model, expected):
    found = capabilities.of_source(source_of(model), CONFIG.date, CONFIG.models[model].kwargs)
    assert found == expected
    assert json.loads((ROOT / "models.capabilities.lock").read_text())["data"][model]["capabilities"] == expected


def test_a_refused_tool_role_gets_a_polyfilled_case_beside_its_refusal():
    cases = {case.stem: case for case in model_cases(CONFIG.models["gemma3"])}
    assert golden_file.read(GOLDENS / "gemma3" / "tool-result.json").outcome == "error"
    fitted = golden_file.read(GOLDENS / "gemma3" / "tool-result_polyfilled.json")
    assert fitted.outcome == "ok" and fitted.extra["polyfilled"]["from"] == "tool-result"
    roles = [m["role"] for m in cases["tool-result_polyfilled"].request["messages"]]
    assert roles == ["system", "user", "assistant", "user"]  # the tool turn is a user turn now
    assert '"tool_response"' in fitted.prompt and '"tool_calls"' in fitted.prompt
    assert "tools" not in cases["tool-result_polyfilled"].request
    # llama3 refuses parallel calls, which have no faithful form: no polyfilled case
    assert "parallel-tool-calls_polyfilled" not in {c.stem for c in model_cases(CONFIG.models["llama3"])}
    # qwen3 takes everything: nothing polyfilled
    assert not [c for c in model_cases(CONFIG.models["qwen3"]) if c.polyfills]


def test_polyfills_keep_the_conversation_and_its_order():
    request = {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "a1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "b2", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "CET"}}}]},
            {"role": "tool", "tool_call_id": "a1", "name": "get_weather", "content": "sunny"},
            {"role": "tool", "tool_call_id": "b2", "name": "get_time", "content": "noon"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        "tool_choice": "auto",
    }
    lacking = {"system_role": "refused", "tools": "ignored", "tool_calls": "ignored", "tool_responses": "refused",
               "parallel_tool_calls": "ignored"}
    assert polyfill.wanted(request, lacking)  # parallel calls are covered by writing calls as text
    out, notes = polyfill.apply(request, lacking)
    assert len(notes) == 4 and "tools" not in out and "tool_choice" not in out
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    assert out["messages"][0]["content"] == "Be terse.\n\nWeather?"
    calls = json.loads(out["messages"][1]["content"].split("\n", 1)[1])["tool_calls"]
    assert calls == [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1"},
                     {"name": "get_time", "arguments": {"tz": "CET"}, "id": "b2"}]
    first, second = out["messages"][2]["content"].split("\n\n")  # two results, one user turn
    assert json.loads(first)["tool_response"] == {"tool": "get_weather", "content": "sunny", "tool_call_id": "a1"}
    assert json.loads(second)["tool_response"]["content"] == "noon"
    assert request["messages"][0]["role"] == "system"  # the shape's own body is untouched
    only_parallel = {**dict.fromkeys(polyfill.CAPABILITIES, "yes"), "parallel_tool_calls": "refused"}
    assert not polyfill.wanted(request, only_parallel)


REFUSES_SYSTEM = """{%- if messages[0].role == 'system' %}
{{- raise_exception('System role not supported') }}
{%- endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


@pytest.mark.slow
def test_a_template_that_refuses_the_system_role_still_gets_most_of_the_matrix(tmp_path):
    (tmp_path / "small.jinja").write_text(REFUSES_SYSTEM, encoding="utf-8")
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  small:\n    tokenizer: {pack: \"npm:qwen3\"}\n    template: {file: small.jinja}\n"
                      "    shapes: {all_except: [image, video]}\n    engines: [transformers, minijinja]\n",
                      encoding="utf-8")
    out = tmp_path / "goldens"
    first = run("regenerate", "--config", config, "--goldens", out)
    assert first.exit_code == 0, first.output
    lock = json.loads((tmp_path / "models.capabilities.lock").read_text())["data"]
    assert lock["small"]["capabilities"]["system_role"] == "refused"
    items = [golden_file.read(p) for p in sorted((out / "small").glob("*.json"))]
    refused = [i.case for i in items if i.outcome == "error"]
    fitted = [i.case for i in items if i.outcome == "ok" and "polyfilled" in i.extra]
    assert "small/plain" in refused and "small/plain_polyfilled" in fitted
    assert len([i for i in items if i.outcome == "ok"]) > len(items) / 2, refused
    before = {p: p.read_bytes() for p in [*out.rglob("*"), tmp_path / "models.capabilities.lock"] if p.is_file()}
    again = run("regenerate", "--config", config, "--goldens", out)
    assert again.exit_code == 0 and again.stdout.strip().endswith(f"0 written, {len(items)} unchanged, 0 removed")
    assert {p: p.read_bytes() for p in before} == before
    check = run("check", "--config", config, "--goldens", out, "--engine", "minijinja")
    assert check.exit_code == 0, check.output
    ok = len(items) - len(refused)
    assert f"{len(items)} checked: {ok} rendered and match, {len(refused)} both refuse" in check.stdout


def test_a_damaged_lock_is_one_line(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  small:\n    tokenizer: {pack: \"npm:qwen3\"}\n", encoding="utf-8")
    (tmp_path / "models.capabilities.lock").write_text('{"small": {"capabilities": {"system_role": "maybe"}}}')
    line = one_line_error(run("regenerate", "--config", config, "--goldens", tmp_path / "goldens"))
    assert "models.capabilities.lock: small: capabilities must map" in line and "delete it" in line


def test_a_request_file_may_not_take_a_polyfilled_name(tmp_path):
    (tmp_path / "plain_polyfilled.json").write_text('{"messages": [{"role": "user", "content": "hi"}]}')
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  small:\n    tokenizer: {pack: \"npm:qwen3\"}\n"
                      "    shapes: {only: [plain], requests: [plain_polyfilled.json]}\n", encoding="utf-8")
    line = one_line_error(run("regenerate", "--config", config, "--goldens", tmp_path / "goldens"))
    assert "`<shape>_polyfilled` names the form goldens makes" in line


def test_regenerate_names_cases_whose_ids_another_case_renders(snapshot):
    every = review.read_back(GOLDENS, {c.id: None for c in model_cases(CONFIG.models["gemma3"])})
    lines = review.same_ids(every)
    assert len(lines) == 1 and lines[0].startswith("gemma3: ") and " cases render another case's ids" in lines[0]
    assert lines[0] == snapshot  # which cases are twins is a reviewed finding: a snapshot update when it moves
    assert "tools = plain" in lines[0] and "tools-reduced = plain" in lines[0]
    assert "tool-result = " not in lines[0]  # the first of a group is not its own twin
