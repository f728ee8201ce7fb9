"""Replay every golden through every engine its model lists, against real servers.

Each test asks the judge (the one `goldens check` uses, serving path included) for the verdict
on the engine's answer against the committed golden, or the engine's reviewed ledger entry where
one exists: a match or a known divergence, and a stand-in endpoint that disagrees with serving
only where a reviewed stand-in entry says so. The servers are the session's (conftest.py):
llama-server from the pinned build and vLLM from its own venv, each on a tiny model carrying the
real tokenizer and template. The transformers engine is the reference itself;
test_replay_transformers.py has its smoke test.
"""

from __future__ import annotations

import pytest
from conftest import CONFIG, GOLDENS, engine_marks, engine_of, golden_of, model_marks

from generator.config import engine_registry
from generator.config.cases import matrix, replays
from generator.replay.judging.judge import judge


def _memory_bound(engine: str):
    """The engine's managed server when it is one conftest.py runs a model at a time (vLLM)."""
    server = engine_registry.lookup(engine).server
    return server if server is not None and server.one_model_at_a_time else None


REPLAYED = [
    pytest.param(case, engine, id=f"{case.id}@{engine}",
                 marks=(engine_marks(engine) or model_marks(case.model))
                 + ([pytest.mark.server(server.kind, case.model)] if (server := _memory_bound(engine)) else []))
    for case in matrix(CONFIG)
    for engine in CONFIG.models[case.model].engines
    if engine != "transformers" and replays(case, engine)  # transformers: test_replay_transformers.py
]


@pytest.mark.parametrize(("case", "engine_name"), REPLAYED)
def test_replay(case, engine_name, pool):
    outcome = judge(engine_of(pool, engine_name, case.model), golden_of(case.id), GOLDENS, confirm=True,
                    reviews=CONFIG.models[case.model].disputes)  # as `goldens check` judges a disputed case
    assert outcome.status in ("match", "both-refuse", "known"), outcome.detail
    assert outcome.finding is None or outcome.finding.status == "known", outcome.finding.detail


CONFIRMED = [c for c in matrix(CONFIG) if c.shape in ("plain", "tools-reduced", "multi-turn")
             and "llama-server" in CONFIG.models[c.model].engines and not c.variant]


@pytest.mark.integration
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
