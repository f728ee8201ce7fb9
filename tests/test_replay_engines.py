"""Replay every golden through every engine its model lists, against real servers.

Each test is `assert judged(engine, request) == snapshot` (what `goldens check` judges: vLLM's
serving path, the other engines' own ids), the snapshot being the committed golden, or the
engine's reviewed ledger entry where one exists; a reviewed stand-in entry is checked beside it. The servers are the session's
(conftest.py): llama-server from the pinned build and vLLM from its own venv, each on a tiny
model carrying the real tokenizer and template. The transformers engine is the reference itself;
test_replay_transformers.py has its smoke test.
"""

from __future__ import annotations

import pytest
from conftest import CONFIG, GOLDENS, engine_of, golden_of

from generator.config.cases import matrix, replays
from generator.replay import ledger
from generator.replay.judge import answer, judged
from generator.replay.snapshot import golden_extension

REPLAYED = [
    pytest.param(case, engine, id=f"{case.id}@{engine}",
                 marks=[pytest.mark.server("vllm", case.model)] if engine == "vllm" else [])
    for case in matrix(CONFIG)
    for engine in CONFIG.models[case.model].engines
    if engine != "transformers" and replays(case, engine)  # transformers: test_replay_transformers.py
]


@pytest.mark.parametrize(("case", "engine_name"), REPLAYED)
def test_replay(case, engine_name, pool, snapshot):
    engine = engine_of(pool, engine_name, case.model)
    item = golden_of(case.id)
    extension = golden_extension(GOLDENS, case.id, item.request, item.provenance, engine=engine_name)
    assert judged(engine, item.request) == snapshot.use_extension(extension)  # what `check` judges
    stand_in = ledger.read_stand_in(GOLDENS, case.id, engine_name)  # a reviewed stand-in finding
    if stand_in is not None:
        assert list(answer(engine, item.request)) == stand_in.ids


CONFIRMED = [c for c in matrix(CONFIG) if c.shape in ("plain", "tools-reduced", "multi-turn")
             and "llama-server" in CONFIG.models[c.model].engines and not c.variant]


@pytest.mark.parametrize("case", CONFIRMED, ids=[c.id for c in CONFIRMED])
def test_llama_server_stand_in_matches_its_chat_path(case, pool):
    """/apply-template + /tokenize stands in for the chat path; confirm it on every run:
    /completion evaluates exactly the stand-in's ids, /v1/chat/completions exactly as many.
    (Whether those ids are the golden's is test_replay's question.)"""
    item = golden_of(case.id)
    engine = engine_of(pool, "llama-server", case.model)
    ids = engine.ids(item.request)
    served = engine.serve(item.request, ids)
    assert served.counts == {"/v1/chat/completions usage.prompt_tokens": len(ids),
                             "/completion tokens_evaluated": len(ids)}, served
