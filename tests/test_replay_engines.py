"""Replay every golden through every engine its model lists, against real servers.

Each test is `assert engine.ids(request) == snapshot`, the snapshot being the committed golden,
or the engine's reviewed ledger entry where one exists. The suite starts the servers it needs
(llama-server from the pinned build, vLLM from its own venv, each on a tiny model carrying the
real tokenizer and template) once per session and stops them at the end.
"""

from __future__ import annotations

import functools

import pytest
from conftest import CONFIG, GOLDENS, source_of

from generator.config.cases import matrix
from generator.engines import Refused
from generator.engines.pool import EnginePool
from generator.goldens import golden_file
from generator.replay import ledger
from generator.replay.snapshot import golden_extension

REPLAYED = [
    (case, engine)
    for case in matrix(CONFIG)
    for engine in CONFIG.models[case.model].engines
    if engine != "transformers"  # tests/test_replay_transformers.py
]


@pytest.fixture(scope="session")
def pool():
    with EnginePool(CONFIG.date, versions=CONFIG.engine_versions) as engines:  # the pins in models.yaml
        yield engines


@functools.lru_cache(maxsize=None)
def _engine(pool, name: str, model: str):
    return pool.engine(name, CONFIG.models[model], source_of(model))


@pytest.mark.parametrize(("case", "engine_name"), REPLAYED, ids=[f"{c.id}@{e}" for c, e in REPLAYED])
def test_replay(case, engine_name, pool, snapshot):
    engine = _engine(pool, engine_name, case.model)
    item = golden_file.read(golden_file.golden_path(GOLDENS, case.id))
    entry = ledger.read(GOLDENS, case.id, engine_name)
    if item.outcome == "error" or (entry is not None and entry.refused):
        with pytest.raises(Refused):
            engine.ids(item.request)
        return
    extension = golden_extension(GOLDENS, case.id, item.request, item.provenance, engine=engine_name)
    assert engine.ids(item.request) == snapshot.use_extension(extension)


CONFIRMED = [c for c in matrix(CONFIG) if c.shape in ("plain", "tools-reduced", "multi-turn")
             and "llama-server" in CONFIG.models[c.model].engines and not c.variant]


@pytest.mark.parametrize("case", CONFIRMED, ids=[c.id for c in CONFIRMED])
def test_llama_server_stand_in_matches_its_chat_path(case, pool):
    """/apply-template + /tokenize stands in for the chat path; confirm it on every run:
    /completion evaluates exactly the stand-in's ids, /v1/chat/completions exactly as many.
    (Whether those ids are the golden's is test_replay's question.)"""
    item = golden_file.read(golden_file.golden_path(GOLDENS, case.id))
    engine = _engine(pool, "llama-server", case.model)
    ids = engine.ids(item.request)
    confirmed = engine.confirm(item.request, ids)
    assert confirmed["completion_tokens_evaluated"] == len(ids), confirmed
    assert confirmed["chat_prompt_tokens"] == len(ids), confirmed
