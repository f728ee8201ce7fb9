"""`goldens engines --matrix`: every (model, engine) cell of models.yaml, replayed or why not."""

from __future__ import annotations

from click.testing import CliRunner
from conftest import CONFIG, ROOT

from generator.cli import main
from generator.config import engine_matrix, engine_registry


def test_every_model_meets_every_usable_engine_once():
    """Every engine that renders has a column; a parse-only one (sglang) has none."""
    cells = engine_matrix.matrix(CONFIG)
    engines = [info.name for info in engine_registry.registered() if info.problem is None and info.renders]
    assert "sglang" not in engines and "sglang" in engine_registry.available()
    assert [(c.model, c.engine) for c in cells] == [(m, e) for m in CONFIG.models for e in engines]
    for cell in cells:
        assert cell.replayed == (cell.engine in CONFIG.models[cell.model].engines)
        assert bool(cell.why_not) != cell.replayed


def test_a_cell_says_why_an_engine_does_not_replay_a_model():
    by = {(c.model, c.engine): c for c in engine_matrix.matrix(CONFIG)}
    assert by[("gpt-oss", "harmony")].replayed
    assert by[("qwen3", "harmony")].why_not == "harmony renders gpt-oss (o200k_harmony) only"
    assert by[("mistral-nemo", "mistral-common")].replayed
    assert by[("qwen3", "mistral-common")].why_not.startswith("mistral-common encodes Mistral models")
    assert by[("qwen3", "openai")].why_not == "any server given --url (ids where the server returns them); none runs here"
    assert "through llama-server's /apply-template (Ollama PR #16031)" in by[("qwen3", "ollama")].why_not


def test_the_command_prints_the_table_with_numbered_reasons():
    result = CliRunner().invoke(main, ["engines", "--matrix", "--config", str(ROOT / "models.yaml")])
    assert result.exit_code == 0, result.output
    render, _, parse = result.output.partition("\nThe output side")
    for text, first in ((render, "| model | transformers | llama-server |"), (parse, "| model | transformers |")):
        lines = text[text.index("| model"):].splitlines()
        assert lines[0].startswith(first)
        rows = [line for line in lines[2:] if line.startswith("| ")]
        assert [row.split(" | ")[0][2:].removesuffix(" (surrogate)") for row in rows] == list(CONFIG.models)
        numbers = {part.strip() for row in rows for part in row.split("|") if part.strip().startswith("- (")}
        notes = [line for line in lines if line.startswith("(")]
        assert sorted(numbers) == sorted(f"- {note.split(')')[0]})" for note in notes)
    cells = engine_matrix.parse_matrix(CONFIG)
    assert parse.count("| parsed") + parse.count(" parsed |") >= 1
    assert sum(cell.replayed for cell in cells) == sum(row.count(" parsed ") for row in parse.splitlines())
