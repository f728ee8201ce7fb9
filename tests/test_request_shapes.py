"""A team's own request bodies as shapes: goldened, replayed and bisected like built-in shapes.

The bodies are what an OpenAI client sends (a `model`, a `temperature`, tools, a reasoning turn);
the file stem names the shape, so `requests/checkout.json` becomes the case `qwen3/checkout`.
"""

from __future__ import annotations

import json

import pytest

from click.testing import CliRunner

from generator.cli import main
from generator.goldens import golden_file

CHECKOUT = {
    "model": "qwen3-prod", "temperature": 0.2,
    "messages": [
        {"role": "system", "content": "You are the checkout assistant."},
        {"role": "user", "content": "Pay my last invoice."},
        {"role": "assistant", "content": "", "reasoning_content": "Find the invoice first.",
         "tool_calls": [{"id": "k2l3m4n5o", "type": "function",
                         "function": {"name": "find_invoice", "arguments": "{\"which\": \"last\"}"}}]},
        {"role": "tool", "tool_call_id": "k2l3m4n5o", "content": "{\"id\": 17, \"total\": 42}"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "find_invoice", "description": "Find an invoice.",
        "parameters": {"type": "object", "properties": {"which": {"type": "string"}}, "required": ["which"]}}}],
}


def workspace(tmp_path):
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / "checkout.json").write_text(json.dumps(CHECKOUT), encoding="utf-8")
    (tmp_path / "requests" / "greeting.json").write_text(
        '{"messages": [{"role": "user", "content": "Hello!"}]}', encoding="utf-8")
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n  qwen3:\n    tokenizer: {pack: \"npm:qwen3\"}\n"
        "    shapes: {only: [plain], requests: [requests/*.json]}\n"
        "    variants:\n      thinking-off: {enable_thinking: false}\n"
        "    engines: [transformers, llama-server, minijinja]\n", encoding="utf-8")
    return config


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.integration
def test_request_files_are_goldened_replayed_and_bisected(tmp_path):
    config = workspace(tmp_path)
    out = tmp_path / "goldens"
    result = run("regenerate", "--config", config, "--out", out)
    assert result.exit_code == 0, result.output
    assert "6 written" in result.stdout  # plain, checkout, greeting x default, thinking-off
    checkout = golden_file.read(out / "qwen3" / "checkout.json")
    assert checkout.outcome == "ok" and "Find the invoice first." in checkout.prompt
    assert "model" not in checkout.request and checkout.request["tools"] == CHECKOUT["tools"]
    off = golden_file.read(out / "qwen3" / "checkout--thinking-off.json")
    assert off.request["chat_template_kwargs"] == {"enable_thinking": False}

    again = run("regenerate", "--config", config, "--out", out)
    assert "0 written, 6 unchanged" in again.stdout, again.output  # deterministic, byte for byte

    check = run("check", "--config", config, "--goldens", out, "--engine", "transformers",
                "--engine", "minijinja", "--engine", "llama-server")
    assert check.exit_code == 0, check.output
    assert "18 checked: 18 rendered and match" in check.stdout

    bisect = run("bisect", "--config", config, "--engine", "llama-server", "--good", "9246", "--bad", "9247",
                 "--case", "qwen3/checkout", "--case", "qwen3/greeting")
    assert bisect.exit_code == 1, bisect.output
    assert "agree on all 2 case(s)" in bisect.stdout
