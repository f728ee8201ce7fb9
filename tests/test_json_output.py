"""`--json` on models, engines, diff and bisect: one JSON document on stdout, stable keys (the
ones docs/commands.md lists), nothing else on stdout."""

from __future__ import annotations

import json
import shutil

import pytest

from click.testing import CliRunner
from conftest import CONFIG, ROOT, source_of
from test_diff import change_token, edit, git, repo  # noqa: F401 - the fixture

from generator.cli import main
from generator.config import engine_registry
from generator.config.cases import model_cases, parse_cases_of


def document(*args, code: int = 0) -> dict:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr, result.exception)
    return json.loads(result.stdout)  # the whole of stdout is the one document


def test_models_json_is_the_matrix():
    data = document("models", "--config", ROOT / "models.yaml", "--json")
    assert set(data) == {"schema", "config", "date", "engine_versions", "models", "families"}
    assert data["schema"] == "goldens.models/1" and data["date"] == CONFIG.date.isoformat()
    assert data["engine_versions"] == CONFIG.engine_versions
    assert [m["name"] for m in data["models"]] == list(CONFIG.models)
    qwen3 = data["models"][0]
    assert set(qwen3) == {"name", "cases", "parse_cases", "tokenizer", "template", "shapes", "variants", "engines",
                          "processor", "pins", "references"}
    assert qwen3["references"] == {"template": "transformers", "encoder": None, "disputes": []}
    assert qwen3["cases"] == [c.id for c in model_cases(CONFIG.models["qwen3"])]
    assert qwen3["parse_cases"] == [c.id for c in parse_cases_of(CONFIG.models["qwen3"])]
    assert qwen3["tokenizer"] == {"kind": "pack", "value": "npm:qwen3", "revision": None, "tokenizer_config": None}
    assert qwen3["variants"] == {"default": {}, "thinking-off": {"enable_thinking": False}}
    phi = next(m for m in data["models"] if m["name"] == "phi3.5")
    assert phi["tokenizer"]["tokenizer_config"] == {"add_bos_token": False}
    assert phi["template"] == {"kind": "pack", "value": "llama.cpp:microsoft-Phi-3.5-mini-instruct.jinja", "name": None}
    gemma3 = next(m for m in data["models"] if m["name"] == "gemma3")
    assert gemma3["processor"].startswith("google/gemma-3-4b-it processor_config.json")


def test_models_json_resolve_adds_the_current_hashes(tmp_path):
    config = tmp_path / "models.yaml"
    shutil.copytree(source_of("qwen3").tokenizer_dir, tmp_path / "qwen3")  # a folder beside models.yaml
    config.write_text("models:\n  q:\n    tokenizer: {dir: qwen3}\n", encoding="utf-8")
    data = document("models", "--config", config, "--json", "--resolve")
    resolved = data["models"][0]["resolved"]
    assert set(resolved) == {"origin", "template_origin", "template_sha256", "tokenizer_sha256"}
    assert resolved["tokenizer_sha256"] == source_of("qwen3").tokenizer_sha256


def test_engines_json_lists_every_engine_with_its_origin():
    data = document("engines", "--json")
    assert data["schema"] == "goldens.engines/1"
    rows = {row["name"]: row for row in data["engines"]}
    assert [row["name"] for row in data["engines"]][:len(engine_registry.BUILT_IN)] == [
        info.name for info in engine_registry.BUILT_IN]
    assert rows["vllm"] == {"name": "vllm", "origin": "built-in", "summary": engine_registry.BUILT_IN[3].summary,
                            "any_model": False, "usable": True, "problem": None}
    assert rows["openai"]["any_model"] is True


def test_diff_json_lists_what_moved_first(repo):  # noqa: F811 - the fixture
    data = document("diff", "--goldens", repo / "goldens", "--json")
    assert data == {"schema": "goldens.diff/1", "against": "HEAD", "changed": 0, "tokens_moved": 0, "goldens": [],
                    "sources": {}}

    def bump(item):
        item.provenance["transformers_version"] = "9.9.9"

    edit(repo, "qwen3/tools", bump)
    edit(repo, "qwen3/plain", change_token)
    data = document("diff", "--goldens", repo / "goldens", "--json")
    assert (data["changed"], data["tokens_moved"]) == (2, 1)
    first, second = data["goldens"]
    assert first == {
        "name": "qwen3/plain", "path": "goldens/qwen3/plain.json", "kind": "golden", "status": "changed",
        "tokens_moved": True, "metadata_only": False, "first_moved_token": 5, "old_tokens": 25, "new_tokens": 25,
        "fields": [], "summary": "qwen3/plain: 1 token changed at 5", "same_change_as": None,
    }
    assert second["name"] == "qwen3/tools" and second["tokens_moved"] is False and second["metadata_only"] is True
    assert second["fields"] == ["provenance.transformers_version"] and second["first_moved_token"] is None
    assert data["sources"] == {}  # a library version is no source of the model's


@pytest.mark.integration  # Transformers venvs from the package index
def test_bisect_json_is_the_search_as_data():
    """The known answer (test_bisect.py: Transformers 5.21.0 began copying reasoning_content
    into `thinking`), as data; the human lines go to stderr."""
    result = CliRunner().invoke(main, ["bisect", "--config", str(ROOT / "models.yaml"), "--engine", "transformers",
                                       "--good", "5.20.1", "--bad", "5.22.0", "--case", "gpt-oss/agentic-turn",
                                       "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    data = json.loads(result.stdout)
    assert data["schema"] == "goldens.bisect/1" and data["exit_code"] == 0
    assert (data["engine"], data["good"], data["bad"], data["cases"]) == (
        "transformers", "5.20.1", "5.22.0", ["gpt-oss/agentic-turn"])
    assert data["releases"] == 5  # 5.20.1 5.20.2 5.21.0 5.21.1 5.22.0
    assert (data["jobs"], data["rounds"], data["at_most_rounds"]) == (1, 3, 3)
    assert [t["release"] for t in data["tried"]] == ["5.20.1", "5.22.0", "5.21.0", "5.20.2"]
    assert [t["changed"] for t in data["tried"]] == [None, "gpt-oss/agentic-turn", "gpt-oss/agentic-turn", None]
    assert all(set(t) == {"release", "label", "changed", "ready_seconds", "cache"} for t in data["tried"])
    assert data["first_changed"] == {"release": "5.21.0", "label": "5.21.0"}
    assert data["before"] == {"release": "5.20.2", "label": "5.20.2"}
    assert data["first_divergence"].startswith("gpt-oss/agentic-turn: drift at token 166 (205 vs 225 tokens)")
    assert "first changed release: 5.21.0 (the one before it: 5.20.2)" in result.stderr
