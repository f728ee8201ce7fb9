"""Every golden against the installed Transformers, as syrupy snapshots.

`pytest --snapshot-update` rewrites the goldens from the reference (the same bytes as
`goldens regenerate`); a plain run fails on any token that moved since the goldens were made.
The transformers *engine* is that same reference at the same pinned version, so its replay is
one smoke test of the replay path, not a second comparison of the reference with itself.
"""

from __future__ import annotations

import functools

import pytest
from conftest import CONFIG, GOLDENS, matrix_marks, source_of

from generator import files
from generator.config.cases import matrix
from generator.engines.transformers.engine import TransformersEngine
from generator.goldens import golden_file
from generator.goldens.regenerate import provenance, reference_golden
from generator.replay.judging import divergence
from generator.replay.judging.judge import judge
from generator.replay.judging.snapshot import GoldenSnapshot

CASES = matrix(CONFIG)


@functools.cache
def _stamp(model: str) -> dict[str, str]:
    return provenance(source_of(model), CONFIG)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=matrix_marks(c)) for c in CASES])
def test_reference_golden(case, snapshot):
    """The reference's golden is the committed file, byte for byte (or rewrites it under
    --snapshot-update, in the bytes `goldens regenerate` writes)."""
    golden = reference_golden(case, source_of(case.model), CONFIG, _stamp(case.model))
    assert golden == snapshot(name=case.id, extension_class=GoldenSnapshot)


@pytest.mark.parametrize("case_id", ["qwen3/multi-turn--thinking-off", "gemma3/tool-result"])
def test_transformers_engine_replay_smoke(case_id):
    """The replay path end to end (Engine protocol, Ids, the judge) on one golden that renders
    and one the template refuses: a match, and both refuse (passing, never counted as a match)."""
    case = next(c for c in CASES if c.id == case_id)
    engine = TransformersEngine(source_of(case.model), CONFIG.date)
    golden = golden_file.read(golden_file.golden_path(GOLDENS, case.id))
    outcome = judge(engine, golden, GOLDENS)
    assert outcome.status == ("both-refuse" if golden.outcome == "error" else "match"), outcome.detail
    assert outcome.ok


def test_an_edited_golden_token_is_reported_with_its_position(tmp_path):
    """Drift detection itself: change one token of a copy of a golden and replay."""
    case = next(c for c in CASES if c.id == "qwen3/plain")
    item = golden_file.read(golden_file.golden_path(GOLDENS, case.id))
    item.ids[7] = 12345
    item.pieces[7] = "edited"
    edited_root = tmp_path / "goldens"
    files.atomic_write(golden_file.golden_path(edited_root, case.id), golden_file.dumps(item))
    engine = TransformersEngine(source_of("qwen3"), CONFIG.date)
    outcome = judge(engine, golden_file.read(golden_file.golden_path(edited_root, case.id)), edited_root)
    assert outcome.status == "drift"
    assert outcome.divergence.index == 7
    n = len(item.ids)  # one token replaced: both sides keep the golden's length
    assert f"drift at token 7 ({n} vs {n} tokens)" in outcome.detail
    assert "»7:12345:'edited'" in outcome.detail and "»7:151645:'<|im_end|>'" in outcome.detail


def test_first_divergence_counts_a_shorter_sequence():
    assert divergence.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert divergence.first_divergence([1, 2, 3], [1, 2]) == 2
    assert divergence.first_divergence([1, 2, 3], [1, 9, 3]) == 1
