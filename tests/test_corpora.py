"""Imported corpora (generator/sources/corpora.py, `goldens requests import corpus:NAME`): BFCL's
tools converted as BFCL's own OpenAI handler sends them, and a re-import from the pinned wheel
byte-identical to what is committed under requests/bfcl/."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from generator.cli import main
from generator.sources import corpora

ROOT = Path(__file__).resolve().parents[1]

# the shape of a BFCL v4 question entry's function (bfcl_eval/data/BFCL_v4_live_multiple.json)
FUNCTION = {"name": "ChaDri.change_drink", "description": "Modifies the drink order.",
            "parameters": {"type": "dict", "required": ["drink_id"], "properties": {
                "drink_id": {"type": "string", "description": "The drink."},
                "size": {"type": "float", "description": "Ounces."},
                "extras": {"type": "tuple", "items": {"type": "String"}},
                "options": {"type": "dict", "properties": {"sweet": {"type": "bool"}}},
                "note": {"description": "No type at all."}}}}


def test_tools_are_converted_as_bfcl_s_openai_handler_sends_them():
    (tool,) = corpora.openai_tools([FUNCTION])
    function = tool["function"]
    assert tool["type"] == "function" and function["name"] == "ChaDri_change_drink"
    properties = function["parameters"]["properties"]
    assert function["parameters"]["type"] == "object"
    assert properties["size"] == {"type": "number", "format": "float",
                                  "description": "Ounces. This is a float type value."}
    assert properties["extras"] == {"type": "array", "items": {"type": "string"}}
    assert properties["options"]["properties"]["sweet"]["type"] == "boolean"
    assert properties["note"]["type"] == "string"
    assert FUNCTION["parameters"]["type"] == "dict", "the conversion changed its input"


def test_the_raw_spelling_keeps_bfcl_s_own_types():
    (tool,) = corpora.raw_tools([FUNCTION])
    assert tool == {"type": "function", "function": FUNCTION}


def test_an_unknown_corpus_is_one_error_line(tmp_path):
    result = CliRunner().invoke(main, ["requests", "import", "corpus:nope", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith("goldens: error: unknown corpus 'nope'")


@pytest.mark.integration
def test_a_re_import_of_bfcl_is_byte_identical_to_the_committed_one(tmp_path):
    """From the pinned wheel (downloaded and checked against its sha256), through the same
    distillation, to the same bytes: the committed set is what the pin gives."""
    out = tmp_path / "bfcl"
    result = CliRunner().invoke(main, ["requests", "import", "corpus:bfcl", "--out", str(out)])
    assert result.exit_code == 0, result.output
    committed = ROOT / "requests" / "bfcl"
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in committed.iterdir())
    for path in committed.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes(), path.name
    lock = corpora.read_lock(committed)  # requests/bfcl/bfcl.corpus.lock (generator/locks.py)
    assert lock["sha256"] == corpora.CORPORA["bfcl"].artifact.sha256 and lock["licence"] == "Apache-2.0"
    assert len(lock["kept"]) == len(list(committed.glob("*.json")))
