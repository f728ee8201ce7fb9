"""Stale goldens are not drift: after a template or tokenizer edit without `goldens regenerate`,
`check` says which goldens are stale and how to fix it (exit 2), before any verdict."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import one_line_error, source_of

from generator.cli import main
from generator.goldens import golden_file, staleness


def run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


@pytest.fixture
def team(tmp_path) -> Path:
    """A one-model repository (Qwen3's tokenizer folder, `goldens init`), its goldens regenerated."""
    repo = tmp_path / "team"
    shutil.copytree(source_of("qwen3").tokenizer_dir, repo / "tokenizers" / "qwen3")
    assert run("init", repo, "--dir", repo / "tokenizers" / "qwen3").exit_code == 0
    result = run("regenerate", "--config", repo / "models.yaml", "--goldens", repo / "goldens")
    assert result.exit_code == 0, result.output
    return repo


def edit_template(repo: Path) -> None:
    """A template edit a team makes: words added to every system turn."""
    path = repo / "tokenizers" / "qwen3" / "tokenizer_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edited = data["chat_template"].replace("<|im_start|>system\\n", "<|im_start|>system\\nEdited. ")
    assert edited != data["chat_template"]
    data["chat_template"] = edited
    path.write_text(json.dumps(data), encoding="utf-8")


def check(repo: Path, *args):
    return run("check", "--config", repo / "models.yaml", "--goldens", repo / "goldens", "--engine", "minijinja", *args)


@pytest.mark.slow
def test_a_template_edit_without_regenerate_is_stale_not_drift(team):
    old = golden_file.read(team / "goldens" / "qwen3" / "plain.json").provenance["template_sha256"]
    edit_template(team)
    count = len(list((team / "goldens" / "qwen3").glob("*.json")))
    result = check(team)
    assert result.exit_code == 2, result.output
    assert "DRIFT" not in result.output and "drift" not in result.stdout
    line = one_line_error(result)
    from generator.config import models
    from generator.sources.source import resolve

    config = models.load(team / "models.yaml")
    new = resolve(config.models["qwen3"], config).template_sha256
    assert new != old
    assert line == (f"goldens: error: qwen3: {count} goldens are stale: rendered from template sha256 "
                    f"{old[:12]}, the source now has {new[:12]}; run `goldens regenerate` (then review "
                    f"`goldens diff`)")

    # the fix the line names is the fix: regenerate, then the same check judges and passes
    assert run("regenerate", "--config", team / "models.yaml", "--goldens", team / "goldens").exit_code == 0
    result = check(team)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1].startswith(f"{count} checked: {count} rendered and match")


def test_one_line_per_stale_model_naming_what_moved():
    """The tokenizer too; a golden whose provenance matches is not counted."""
    source = source_of("qwen3")
    here = {"template_sha256": source.template_sha256, "tokenizer_sha256": source.tokenizer_sha256}

    def golden(case: str, **provenance) -> golden_file.Golden:
        return golden_file.Golden(case, {"messages": []}, "ok", [1], ["a"], "a", None, {**here, **provenance})

    items = [golden("qwen3/plain", tokenizer_sha256="a" * 64), golden("qwen3/tools", tokenizer_sha256="a" * 64),
             golden("qwen3/multi-turn")]
    found = staleness.stale_goldens("qwen3", source, items)
    assert found.cases == ("qwen3/plain", "qwen3/tools")
    assert found.line() == (f"qwen3: 2 goldens are stale: rendered from tokenizer sha256 aaaaaaaaaaaa, the "
                            f"source now has {source.tokenizer_sha256[:12]}; run `goldens regenerate` (then "
                            f"review `goldens diff`)")
    assert staleness.stale_goldens("qwen3", source, items[2:]) is None
