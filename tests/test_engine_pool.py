"""The pool's cap on open engines: a check over many models keeps at most GOLDENS_ENGINES_OPEN
engines holding a worker, a process or a connection, and an engine closed for the cap opens
again on its next use with the same answers."""

from __future__ import annotations

import pytest

from conftest import CONFIG, FAST_MODELS, golden_of, source_of
from generator.engines import pool as pool_module
from generator.engines.pool import EnginePool
from generator.errors import GoldensError


def plain_case(model: str) -> str:
    return f"{model}/plain"


def models_with(engine: str) -> list[str]:
    return [name for name, model in CONFIG.models.items() if engine in model.engines
            and golden_of(plain_case(name)).outcome == "ok"]


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_a_cap_that_is_not_a_count_is_one_line(monkeypatch, text):
    monkeypatch.setenv(pool_module.OPEN_MOST, text)
    with pytest.raises(GoldensError) as error:
        EnginePool(CONFIG.date)
    assert "\n" not in str(error.value) and pool_module.OPEN_MOST in str(error.value)


def node_children() -> int:
    """Node processes this test process started and that still run."""
    import os
    from pathlib import Path

    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] != "Z" and command.endswith(b"node"):
            count += 1
    return count


def _check_cap(monkeypatch, engine_name: str, cap: int, running=lambda: 0) -> None:
    # one engine past the cap is enough to close one; the fast tier's models first (cheap tokenizers)
    names = sorted(models_with(engine_name), key=lambda name: name not in FAST_MODELS)[:cap + 1]
    assert len(names) > cap, f"the matrix has too few {engine_name} models to test a cap of {cap}"
    monkeypatch.setenv(pool_module.OPEN_MOST, str(cap))
    with EnginePool(CONFIG.date) as pool:
        engines = {}
        for name in names:
            engines[name] = pool.engine(engine_name, CONFIG.models[name], source_of(name))
            assert pool.open_engines() <= cap and running() <= cap
        first = names[0]
        golden = golden_of(plain_case(first))
        # the first engine was closed for the cap: used again, it opens and answers as before
        assert list(engines[first].ids(golden.request)) == golden.ids
        assert pool.open_engines() <= cap and running() <= cap
    assert pool.open_engines() == 0 and running() == 0


def test_minijinja_engines_beyond_the_cap_are_closed_and_reopen(monkeypatch):
    _check_cap(monkeypatch, "minijinja", 2)


@pytest.mark.integration
def test_node_workers_beyond_the_cap_are_stopped_and_restart(monkeypatch):
    before = node_children()
    _check_cap(monkeypatch, "transformers-js", 2, lambda: node_children() - before)
