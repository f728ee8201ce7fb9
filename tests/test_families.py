"""Built-in families (generator/config/families.py): one per distinct template of the pinned
llama.cpp source. Expectations are derived from that source, never copied counts."""

from __future__ import annotations

import hashlib
import json
import re

import jsonschema
import pytest
from click.testing import CliRunner
from conftest import CONFIG, ROOT

from generator.cli import main
from generator.config import families
from generator.sources import family_catalogue, pack

TEMPLATES = family_catalogue.pinned_templates_dir()
BUILT = families.build(TEMPLATES)
BY_NAME = {family.name: family for family in BUILT}

# Known sources of real tokenizers here, by their models.yaml `pack:` value (sources/source.py).
NAMED_SOURCES = {"llama-models:llama3", "mistral-common:tekken"}


def source_exists(source: str) -> bool:
    registry, _, key = source.partition(":")
    if registry == "npm":
        return key in pack.NPM_TOKENIZERS
    if registry == "llama.cpp":
        return (TEMPLATES.parent / f"ggml-vocab-{key}.gguf").is_file()
    return source in NAMED_SOURCES


def test_the_committed_catalogue_is_what_the_pinned_source_gives():
    committed = families.CATALOGUE.read_text(encoding="utf-8")
    assert committed == family_catalogue.dumps(BUILT), (
        "generator/data/families.json is stale: python -c 'from generator.sources import family_catalogue; family_catalogue.write()'")
    assert list(families.builtin()) == BUILT


def test_every_template_is_in_exactly_one_family():
    files = sorted(path.name for path in TEMPLATES.glob("*.jinja"))
    listed = sorted(f"{c}.jinja" for family in BUILT for c in family.checkpoints)
    assert listed == files


def test_families_are_one_per_template_text():
    digests = {}
    for path in TEMPLATES.glob("*.jinja"):
        digests.setdefault(hashlib.sha256(path.read_bytes()).hexdigest(), set()).add(path.stem)
    assert {f.template_sha256 for f in BUILT} == set(digests)
    assert len({f.template_sha256 for f in BUILT}) == len(BUILT)
    for family in BUILT:
        assert set(family.checkpoints) == digests[family.template_sha256]
        assert family.template_file == f"{family.checkpoints[0]}.jinja"
    assert len(BUILT) >= 40


def test_names_are_unique_safe_and_apart_from_the_matrix():
    names = [family.name for family in BUILT]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9.-]{0,63}", name) for name in names)
    # a matrix model bears a family's name only when it is that family (`family:` in models.yaml)
    assert all(CONFIG.models[name].tokenizer.family == name for name in set(names) & set(CONFIG.models))
    assert families.family_name("moonshotai-Kimi-K2") == "kimi-k2"


@pytest.mark.parametrize("name", ["kimi-k3", "kimi-k2", "deepseek-v4", "deepseek-v3.2", "glm-4.7-flash",
                                  "minimax-m3", "minimax-m2", "qwen3.5-4b"])
def test_the_models_teams_serve_now_have_a_family(name):
    family = BY_NAME[name]
    assert family.tokenizer.kind in ("real", "surrogate")
    assert source_exists(family.tokenizer.source), family.tokenizer.source


def test_every_tokenizer_is_real_or_a_surrogate_of_a_source_here():
    for family in BUILT:
        tokenizer = family.tokenizer
        assert source_exists(tokenizer.source), (family.name, tokenizer.source)
        assert tokenizer.reason
        if tokenizer.kind == "real":
            assert set(family.checkpoints) & set(families.REAL), family.name
            assert tokenizer.adds == ()
        else:
            assert tokenizer.kind == "surrogate"
            assert not set(family.checkpoints) & set(families.REAL), family.name
            assert tokenizer.adds == family.special_tokens
    assert all(source_exists(source) for source, _, _ in families.REAL.values())
    assert set(families.REAL) <= {path.stem for path in TEMPLATES.glob("*.jinja")}  # checked by name


def test_special_tokens_are_written_literally_by_the_template():
    for family in BUILT:
        text = (TEMPLATES / family.template_file).read_text(encoding="utf-8")
        assert all(token in text for token in family.special_tokens), family.name
    assert {"<|im_start|>", "<|im_end|>"} <= set(BY_NAME["qwen3.5-4b"].special_tokens)
    assert "<｜tool▁calls▁begin｜>" in BY_NAME["deepseek-v3.1"].special_tokens
    assert "[TOOL_CALLS]" in BY_NAME["mistral-nemo-instruct-2407"].special_tokens
    assert families.special_tokens("{{ '<think>' }}{{ x.format('<｜hy_eos{}｜>') }}") == ()


FAMILIES_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "checkpoints", "template", "special_tokens", "tokenizer", "models", "reference",
                     "encoder", "engines"],
        "properties": {
            # what replays it here: the matrix's models that are this family (`family:`), and theirs
            "models": {"type": "array", "items": {"type": "string"}},
            "reference": {"enum": ["transformers", None]},
            "encoder": {"type": ["string", "null"]},  # a second reference a model of it declares
            "engines": {"type": "array", "items": {"type": "string"}},
            "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9.-]*$"},
            "checkpoints": {"type": "array", "minItems": 1, "items": {"type": "string"}},
            "template": {
                "type": "object", "additionalProperties": False, "required": ["file", "pack", "sha256"],
                "properties": {"file": {"type": "string", "pattern": r"\.jinja$"},
                               "pack": {"type": "string", "pattern": r"^llama\.cpp:.+\.jinja$"},
                               "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
            },
            "special_tokens": {"type": "array", "items": {"type": "string"}},
            "tokenizer": {
                "type": "object", "additionalProperties": False,
                "required": ["kind", "source", "reason", "tokenizer_config", "adds"],
                "properties": {"kind": {"enum": ["real", "surrogate"]}, "source": {"type": "string"},
                               "reason": {"type": "string", "minLength": 1},
                               "tokenizer_config": {"type": ["object", "null"]},
                               "adds": {"type": "array", "items": {"type": "string"}}},
            },
        },
    },
}


def test_models_json_lists_the_families_beside_the_matrix():
    result = CliRunner().invoke(main, ["models", "--config", str(ROOT / "models.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    jsonschema.validate(data["families"], FAMILIES_SCHEMA)
    assert [f["name"] for f in data["families"]] == [f.name for f in BUILT]
    shared = {f["name"] for f in data["families"]} & {m["name"] for m in data["models"]}
    assert all(m["family"]["name"] == m["name"] for m in data["models"] if m["name"] in shared)
    kimi = next(f for f in data["families"] if f["name"] == "kimi-k3")
    assert kimi["tokenizer"]["kind"] == "surrogate" and kimi["tokenizer"]["adds"]


def test_models_text_prints_one_line_per_family():
    result = CliRunner().invoke(main, ["models", "--config", str(ROOT / "models.yaml")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines()
             if re.match(r"  [a-z0-9.-]+: (real|surrogate) ", line)]
    assert len(lines) == len(BUILT)
    real = sum(f.tokenizer.kind == "real" for f in BUILT)
    assert f"families: {len(BUILT)} built-in ({real} real, {len(BUILT) - real} surrogate)" in result.stdout
    assert "  qwen3-0.6b: real npm:qwen3; template Qwen-Qwen3-0.6B.jinja" in lines
