"""A team's traffic as shapes (`goldens requests import`): a log with duplicates and a malformed
line gives the minimal set of request files, and one error line naming the bad line."""

from __future__ import annotations

import json

from click.testing import CliRunner

from generator.cli import main
from generator.coverage.traffic import redact_text

TEMPLATE = """{%- for message in messages %}
{%- if message.role == 'tool' %}
{{- 'RESULT: ' + message.content + '\\n' }}
{%- else %}
{{- message.role + ': ' + message.content + '\\n' }}
{%- endif %}
{%- endfor %}
"""

PLAIN = {"model": "prod", "messages": [{"role": "user", "content": "Hello there!"}]}
PLAIN_AGAIN = {"model": "prod", "temperature": 0.5, "messages": [{"role": "user", "content": "Hello there!"}]}
TOOL = {"messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a1b2c3d4e", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "sunny 21 C"}]}


def workspace(tmp_path):
    (tmp_path / "small.jinja").write_text(TEMPLATE, encoding="utf-8")
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n  small:\n    tokenizer: {pack: \"npm:qwen3\"}\n    template: {file: small.jinja}\n"
        "    shapes: {only: [plain]}\n    engines: [transformers]\n", encoding="utf-8")
    lines = [json.dumps(PLAIN), json.dumps(PLAIN_AGAIN), "{\"messages\": [", json.dumps(TOOL),
             json.dumps(PLAIN), "", json.dumps(TOOL)]
    log = tmp_path / "traffic.jsonl"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config, log


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_import_keeps_the_minimal_set_and_names_the_malformed_line(tmp_path):
    config, log = workspace(tmp_path)
    out = tmp_path / "requests"
    result = run("requests", "import", log, "--config", config, "--out", out)
    assert result.exit_code == 2, result.output  # some input was bad; the rest still imported
    errors = result.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith("goldens: error: ") and "traffic.jsonl:3:" in errors[0]
    assert "6 bodies read, 2 kept, 1 malformed" in result.stdout
    assert "small: the kept bodies execute 100.0%" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == ["traffic-0001.json", "traffic-0004.json"]
    assert json.loads((out / "traffic-0004.json").read_text(encoding="utf-8")) == TOOL

    # the kept files are request files: wired into a matrix, they golden
    regen_config = config.read_text(encoding="utf-8").replace("{only: [plain]}", "{only: [plain], requests: [requests/*.json]}")
    config.write_text(regen_config, encoding="utf-8")
    regen = run("regenerate", "--config", config, "--out", tmp_path / "goldens")
    assert regen.exit_code == 0 and "3 written" in regen.stdout, regen.output


def test_redact_keeps_the_form_and_the_structure(tmp_path):
    config, log = workspace(tmp_path)
    out = tmp_path / "redacted"
    result = run("requests", "import", log, "--config", config, "--out", out, "--redact")
    assert "2 kept" in result.stdout
    body = json.loads((out / "traffic-0004.json").read_text(encoding="utf-8"))
    assert body["messages"][0]["content"] == "Xxxxxxx xx Xxxxx?"
    assert json.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Xxxxx"}
    assert body["messages"][2]["content"] == "xxxxx 00 X"
    assert redact_text("<think>\nWhy 2?\n</think>ok") == "<think>\nXxx 0?\n</think>xx"
