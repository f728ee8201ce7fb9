"""Coverage-guided shapes (`goldens requests search`): variations that reach template code the
matrix does not are written as request files, the minimal set, deterministically."""

from __future__ import annotations

import json

from click.testing import CliRunner

from generator.cli import main

# Line 3 runs only for a tool result that carries `name`; line 5 only for a developer message,
# and it refuses. The matrix of `plain` reaches neither.
TEMPLATE = """{%- for message in messages %}
{%- if message.role == 'tool' and message.name is defined %}
{{- 'RESULT OF ' + message.name + ': ' }}
{%- elif message.role == 'developer' %}
{{- raise_exception('developer messages are not supported') }}
{%- endif %}
{{- message.role + ': ' + (message.content if message.content is string else '') + '\\n' }}
{%- endfor %}
"""


def workspace(tmp_path, requests: str = "") -> object:
    (tmp_path / "small.jinja").write_text(TEMPLATE, encoding="utf-8")
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n  small:\n    tokenizer: {pack: \"npm:qwen3\"}\n    template: {file: small.jinja}\n"
        f"    shapes: {{only: [plain]{requests}}}\n    engines: [transformers]\n", encoding="utf-8")
    return config


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_search_reaches_the_branches_and_records_the_refusal(tmp_path):
    config = workspace(tmp_path)
    out = tmp_path / "requests"
    result = run("requests", "search", "--config", config, "--out", out)
    assert result.exit_code == 0, result.output
    kept = sorted(p.name for p in (out / "small").iterdir())
    assert len(kept) == 2, result.output  # one body per branch: the minimal set
    bodies = [json.loads((out / "small" / name).read_text(encoding="utf-8")) for name in kept]
    assert any(m.get("role") == "tool" and "name" in m for b in bodies for m in b["messages"])
    assert any(m.get("role") == "developer" for b in bodies for m in b["messages"])
    assert "developer messages are not supported" in result.stdout  # the refusal is its outcome
    assert "-> 100.0%" in result.stdout
    first = {name: (out / "small" / name).read_bytes() for name in kept}

    again = run("requests", "search", "--config", config, "--out", tmp_path / "again")
    assert again.exit_code == 0, again.output
    assert {p.name: p.read_bytes() for p in (tmp_path / "again" / "small").iterdir()} == first

    # once the keepers are in the matrix, nothing is left to find, and regenerate goldens them
    wired = workspace(tmp_path, ", requests: [requests/small/*.json]")
    after = run("requests", "search", "--config", wired, "--out", tmp_path / "third")
    assert "0 of" in after.stdout and not (tmp_path / "third").exists(), after.output
    goldens = tmp_path / "goldens"
    regen = run("regenerate", "--config", wired, "--out", goldens)
    assert regen.exit_code == 0, regen.output
    outcomes = sorted(json.loads(p.read_text(encoding="utf-8"))["outcome"] for p in (goldens / "small").glob("cov-*.json"))
    assert outcomes == ["error", "ok"]
