"""The fast tier (`make test-fast`) starts no server, build, venv install or download: it runs
with GOLDENS_LIGHT=1, which makes each of them refuse in one line, so a test that needs one and
is not marked `integration` fails there instead of slipping a build into the one-minute loop."""

from __future__ import annotations

import pytest

from generator import heavy
from generator.errors import GoldensError
from generator.servers import llama_cpp, process, venv
from generator.sources import registry


def test_a_light_run_refuses_every_kind_of_heavy_work(monkeypatch, tmp_path):
    monkeypatch.setenv("GOLDENS_LIGHT", "1")
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))  # nothing cached: each would do the work
    registry._listing.cache_clear()
    attempts = {
        "a server start": lambda: process.ManagedServer(["true"], name="tiny").start(),
        "a build": lambda: llama_cpp.build_llama_server(11434),
        "a venv install": lambda: venv._install(tmp_path / "v", [], "print(1)", "1"),
        "a package-index look-up": lambda: registry.versions("transformers"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(GoldensError, match="refused in a light run"):
            attempt()
        assert not (tmp_path / "v").exists(), what


def test_an_ordinary_run_is_not_light(monkeypatch):
    monkeypatch.delenv("GOLDENS_LIGHT", raising=False)
    heavy.require("anything")  # no error
    monkeypatch.setenv("GOLDENS_LIGHT", "0")
    assert not heavy.light()
