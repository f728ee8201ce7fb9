"""The fast tier (`make test-fast`) starts no server, build, venv install or download: it runs
with GOLDENS_LIGHT=1, which makes each of them refuse in one line, so a test that needs one and
is not marked `integration` fails there instead of slipping a build into the one-minute loop."""

from __future__ import annotations

import threading

import pytest
from conftest import CONFIG, IN_PROCESS_ENGINES, SLOW_FIXTURES, golden_of, source_of, tier

from generator import heavy
from generator.config import engine_registry
from generator.engines.pool import EnginePool
from generator.engines.harmony import engine as harmony
from generator.engines.llama_server import llama_cpp
from generator.engines.transformers import venv as transformers_venv
from generator.engines.transformers_js import engine as transformers_js
from generator.errors import GoldensError
from generator.files import file_lock
from generator.servers import process, transformers_reference, venv
from generator.sources import pack, registry


@pytest.fixture
def light(monkeypatch, tmp_path):
    monkeypatch.setenv("GOLDENS_LIGHT", "1")
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))  # nothing cached: each would do the work
    registry._listing.cache_clear()
    return tmp_path


def test_a_light_run_refuses_every_kind_of_heavy_work(light):
    attempts = {
        "a server start": lambda: process.ManagedServer(["true"], name="tiny").start(),
        "background work": lambda: process.Background(["true"]).start(),
        "a build": lambda: llama_cpp.build_llama_server(11434),
        "a venv install": lambda: venv._install(light / "v", [], "print(1)", "1"),
        "a venv made on first use": lambda: venv.ensure("v", lambda: [], "print(1)", "1"),
        "a package-index look-up": lambda: registry.versions("transformers"),
        "a download": lambda: pack._download(transformers_js.JINJA, light / "d"),
        "transformers-js' Node worker": lambda: transformers_js.NodeWorker(light, "", "2026-01-01"),
        "harmony's worker": lambda: harmony.HarmonyWorker("2026-01-01"),
        "a transformers@V worker": lambda: transformers_venv.TransformersWorker("5.20.2").start(),
        "the reference stack's venv": transformers_reference.reference_python,
    }
    for what, attempt in attempts.items():
        with pytest.raises(GoldensError, match="refused in a light run"):
            attempt()
        assert not (light / "v").exists(), what
        assert not (light / "d").exists(), what


def test_a_worker_is_refused_even_with_its_venv_made(light, monkeypatch):
    """A cached venv is no licence: the worker process itself is what the light run refuses."""
    monkeypatch.setattr(transformers_venv, "transformers_python", lambda version: light / "python")
    with pytest.raises(GoldensError, match="transformers@5.20.2 worker: refused in a light run"):
        transformers_venv.TransformersWorker("5.20.2").start()
    monkeypatch.setattr(harmony, "harmony_python", lambda: light / "python")
    with pytest.raises(GoldensError, match="harmony's worker: refused in a light run"):
        harmony.HarmonyWorker("2026-01-01")


def test_a_light_run_refuses_a_build_at_once_while_another_process_builds_it(light):
    """Another process's build holds the lock for minutes: a light run must not wait for it."""
    refused = []

    def attempt():
        try:
            llama_cpp.build_llama_server(11434)
        except GoldensError as error:
            refused.append(str(error))

    with file_lock(light / "llama.cpp" / "b11434" / ".build.lock"):
        thread = threading.Thread(target=attempt, daemon=True)
        thread.start()
        thread.join(timeout=10)
    assert refused and "refused in a light run" in refused[0]


def test_an_ordinary_run_is_not_light(monkeypatch):
    monkeypatch.delenv("GOLDENS_LIGHT", raising=False)
    heavy.require("anything")  # no error
    monkeypatch.setenv("GOLDENS_LIGHT", "0")
    assert not heavy.light()


# ------------------------------------------------------------------ a fixture says its tier

PROBE = "ignore:goldens-tier-probe"  # a real mark, harmless, that nothing else in the suite carries


@pytest.fixture
@tier(pytest.mark.filterwarnings(PROBE))
def declared():
    return "declared"


@pytest.fixture
def through(declared):
    return declared


def probes(node) -> list:
    return [m for m in node.iter_markers("filterwarnings") if m.args == (PROBE,)]


def test_a_fixture_that_declares_its_tier_marks_the_test_that_uses_it(declared, request):
    assert len(probes(request.node)) == 1


def test_the_mark_reaches_a_test_that_uses_the_fixture_through_another(through, request):
    assert len(probes(request.node)) == 1


def test_a_test_without_the_fixture_has_no_mark(request):
    assert probes(request.node) == []


def test_the_heavy_fixtures_declare_their_tiers():
    """What makes a fixture heavy is said where it is defined: the plugin venv is built with uv,
    the shared servers start llama-server and vLLM (integration); the whole-matrix render, in a
    file another change owns, by name."""
    import conftest
    import test_plugins

    for fixture in (test_plugins.venv, conftest.qwen3_llama_server, conftest.vllm_serving):
        assert pytest.mark.integration in fixture._get_wrapped_function().goldens_tier, fixture
    assert "full_run" in SLOW_FIXTURES


# a fast model every in-process engine renders (mistral-common: Tekken only) beside engines that are not
LISTING = "mistral-nemo"


def test_the_in_process_engines_are_the_registrys():
    """conftest's set is the registry's declaration (Entry.in_process), not a second list: the
    reference is in it, and no engine with a server of its own per model, or following one, is."""
    assert IN_PROCESS_ENGINES == {info.name for info in engine_registry.BUILT_IN if info.in_process}
    assert engine_registry.REFERENCE in IN_PROCESS_ENGINES
    served = {info.name for info in engine_registry.BUILT_IN
              if (info.server is not None and info.server.per_model) or info.follows}
    assert served and not served & IN_PROCESS_ENGINES
    assert IN_PROCESS_ENGINES <= set(CONFIG.models[LISTING].engines)


def test_an_in_process_engine_renders_in_a_light_run_and_no_other_engine_does(monkeypatch):
    """What `in_process` claims, done: with GOLDENS_LIGHT=1 (no server start, worker, venv or
    Node) each in-process engine renders a case, and each other engine the model lists that
    renders is refused in one line: it needs the heavy work the fast tier leaves out."""
    monkeypatch.setenv(heavy.LIGHT, "1")
    model, request = CONFIG.models[LISTING], golden_of(f"{LISTING}/plain").request
    others = [name for name in model.engines
              if name not in IN_PROCESS_ENGINES and engine_registry.lookup(name).renders]
    assert others
    with EnginePool(CONFIG.date, versions=CONFIG.engine_versions) as pool:
        for name in sorted(IN_PROCESS_ENGINES):
            ids = pool.engine(name, model, source_of(LISTING)).ids(request)
            assert ids and all(isinstance(i, int) for i in ids), name
        for name in others:
            with pytest.raises(GoldensError, match="refused in a light run"):
                pool.engine(name, model, source_of(LISTING)).ids(request)
