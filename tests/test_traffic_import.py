"""A team's traffic as shapes (`goldens requests import`): a log with duplicates and a malformed
line gives the minimal set of request files, and one error line naming the bad line."""

from __future__ import annotations

import json

from click.testing import CliRunner
from conftest import source_of

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
    arguments = json.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"])
    assert list(arguments.values()) == ["Xxxxx"] and len(list(arguments)[0]) == 4 and "city" not in arguments
    call_id = body["messages"][1]["tool_calls"][0]["id"]
    assert call_id != "a1b2c3d4e" and len(call_id) == 9 and body["messages"][2]["tool_call_id"] == call_id
    assert body["messages"][2]["content"] == "xxxxx 00 X"
    assert redact_text("<think>\nWhy 2?\n</think>ok") == "<think>\nXxx 0?\n</think>xx"


PERSONAL = {
    "messages": [
        {"role": "system", "content": [{"type": "text", "text": "You help Alice Smith."}]},
        {"role": "user", "name": "alice.smith", "content": [
            {"type": "text", "text": "What is on this?"},
            {"type": "image_url", "image_url": {"url": "https://cdn.example.org/alice/passport.png?token=s3cr3t"}}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_Zx81", "type": "function", "function": {
            "name": "lookup_patient", "arguments": {"patient_name": "Alice Smith", "age": 42}}}]},
        {"role": "tool", "name": "lookup_patient", "tool_call_id": "call_Zx81", "content": "diabetes"}],
    "tools": [{"type": "function", "function": {
        "name": "lookup_patient", "description": "Find a patient of Dr. Jones by name",
        "parameters": {"type": "object", "properties": {
            "patient_name": {"type": "string", "description": "Full legal name"},
            "age": {"type": "integer", "enum": [41, 42]}},
            "required": ["patient_name"], "title": "PatientQuery"}}}],
    "documents": [{"title": "Alice's chart", "text": "HbA1c 8.1"}],
    "chat_template_kwargs": {"enable_thinking": False, "user_location": "Paris, 12 rue Alice"},
}


def test_redact_leaves_no_personal_text_and_keeps_names_consistent(tmp_path):
    """Issue 34: document titles and text, image URLs with their token, message names, kwargs
    values, tool names, descriptions and parameter names, and tool-call ids were copied as is."""
    from generator.coverage.traffic import redact, template_words

    keep = template_words(source_of("qwen3").template)  # the kwargs keys a template reads survive
    body = redact(PERSONAL, key=b"log", keep=keep)
    text = json.dumps(body)
    for word in ("Alice", "alice", "Smith", "passport", "s3cr3t", "example", "patient", "Jones", "legal",
                 "PatientQuery", "chart", "HbA1c", "Paris", "rue", "call_Zx81", "diabetes", "42", "41"):
        assert word not in text, word
    tool = body["tools"][0]["function"]
    call = body["messages"][2]["tool_calls"][0]
    assert call["function"]["name"] == tool["name"] == body["messages"][3]["name"]  # still names its tool
    assert call["id"] == body["messages"][3]["tool_call_id"]
    assert set(call["function"]["arguments"]) == set(tool["parameters"]["properties"])
    assert tool["parameters"]["required"] == [n for n in tool["parameters"]["properties"] if len(n) == 12]
    assert tool["parameters"]["properties"][tool["parameters"]["required"][0]]["type"] == "string"
    assert body["chat_template_kwargs"]["enable_thinking"] is False  # structure the template reads
    assert body["messages"][1]["content"][1]["image_url"]["url"].startswith("xxxxx://xxx.xxxxxxx.xxx/")
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert redact(PERSONAL, key=b"log", keep=keep) == body and redact(PERSONAL, key=b"other", keep=keep) != body


def test_redact_renames_every_key_of_free_data_a_template_does_not_spell():
    """Issue 44: `metadata` keys, a response format's schema name, chat_template_kwargs keys and
    document keys were kept verbatim. A key survives only where a selected template spells it
    (the template reads it); every other key is a name like any other."""
    from generator.coverage.traffic import redact, template_words

    keep = template_words(source_of("qwen3").template, "{% for d in documents %}{{ d.title }}{{ d['text'] }}{% endfor %}")
    body = {**PERSONAL,
            "metadata": {"customer_acme_ssn": "123-45-6789", "alice_smith_account": "premium"},
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "AlicePatientRecord", "strict": True, "schema": {
                    "type": "object", "properties": {"diagnosis_code": {"type": "string", "format": "date"}},
                    "$defs": {"PatientAddress": {"type": "object"}},
                    "additionalProperties": {"$ref": "#/$defs/PatientAddress"}}}},
            "documents": [{"title": "chart", "text": "x", "insurer_acme": "y"}],
            "chat_template_kwargs": {"enable_thinking": False, "acme_tenant_id": "t-1"}}
    out = redact(body, key=b"log", keep=keep)
    text = json.dumps(out)
    for word in ("customer_acme_ssn", "alice_smith_account", "AlicePatientRecord", "diagnosis_code",
                 "PatientAddress", "insurer_acme", "acme_tenant_id", "premium", "123"):
        assert word not in text, word
    assert out["chat_template_kwargs"]["enable_thinking"] is False  # qwen3's template reads it
    assert sorted(k for k in out["documents"][0] if k in ("title", "text")) == ["text", "title"]
    schema = out["response_format"]["json_schema"]
    assert schema["strict"] is True and schema["schema"]["type"] == "object"
    ref = schema["schema"]["additionalProperties"]["$ref"]
    assert ref.startswith("#/$defs/") and ref.removeprefix("#/$defs/") in schema["schema"]["$defs"]
    assert next(iter(schema["schema"]["properties"].values()))["format"] == "date"
    assert len(out["metadata"]) == 2 and all(len(k) in (17, 19) for k in out["metadata"])  # same form


def test_a_log_that_is_not_a_regular_file_is_one_line(tmp_path):
    import os

    config, _ = workspace(tmp_path)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    result = run("requests", "import", fifo, "--config", config, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "is a FIFO, not a regular file" in result.stderr, result.output
    folder = tmp_path / "logs"
    (folder / "x.json").mkdir(parents=True)
    (folder / "y.json").write_text(json.dumps(PLAIN))
    result = run("requests", "import", folder, "--config", config, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "x.json: is a directory" in result.stderr, result.output
    assert "1 kept" in result.stdout
    result = run("requests", "import", "/dev/zero", "--config", config, "--out", tmp_path / "o")
    assert result.exit_code == 2 and "character device" in result.stderr, result.output


def test_a_body_over_the_bound_is_one_line_and_the_rest_is_read(tmp_path, monkeypatch):
    from generator.coverage import traffic

    monkeypatch.setattr(traffic, "MAX_BODY", 200)
    config, _ = workspace(tmp_path)
    log = tmp_path / "long.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": "x" * 1000}]}) + "\n" + json.dumps(PLAIN) + "\n")
    bodies, errors = traffic.read_log(log)
    assert [b.body for b in bodies] == [PLAIN]
    assert errors == [f"{log}:1: more than the 200 bytes one body may hold"]
