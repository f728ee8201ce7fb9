"""The goldens pytest plugin (entry point `pytest11`): a team's own suite replays its goldens.

`pytest --goldens` adds, from the team's models.yaml, one test per case per engine
(`models.yaml::qwen3/plain[llama-server]`; `--goldens-engine E[@VERSION]` picks the engines,
default each model's own) judged by the same judge as `goldens check`, and one `[reference]`
test per case: the reference renders the committed golden byte for byte. Under syrupy's
`--snapshot-update` the reference tests write the goldens in exactly the bytes `goldens
regenerate` writes (an engine's answer never becomes a golden: `goldens ledger` records one).

Without `--goldens` the plugin only provides fixtures: `goldens_config` (the matrix) and
`goldens_pool` (a session-scoped EnginePool owning every managed server), and the marker
`server(kind, model)`: tests carrying it for one model's vLLM run together and that server stops
after the last of them, so at most one 3.5 GB vLLM server is up.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

_STATE = pytest.StashKey["_State"]()


class _State:
    """What the session shares: the matrix, its pool once made, marked tests still to run."""

    def __init__(self, config: pytest.Config):
        self.pytest_config = config
        self.pool = None
        self.uses: collections.Counter = collections.Counter()
        self.engines: dict = {}
        self.sources: dict = {}
        self._matrix = None

    def path(self, option: str) -> Path:
        value = Path(self.pytest_config.getoption(option))
        return value if value.is_absolute() else self.pytest_config.rootpath / value

    @property
    def matrix(self):
        if self._matrix is None:
            from generator.config import models

            self._matrix = models.load(self.path("goldens_config"))
        return self._matrix

    def source(self, model: str):
        if model not in self.sources:
            from generator.goldens.regenerate import resolve_sources

            self.sources.update(resolve_sources(self.matrix, [self.matrix.models[model]]))
        return self.sources[model]

    def open_pool(self):
        if self.pool is None:
            from generator.engines.pool import EnginePool

            self.pool = EnginePool(self.matrix.date, versions=self.matrix.engine_versions)
        return self.pool

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("goldens", "goldens: replay the golden files of a models.yaml")
    group.addoption("--goldens", action="store_true", dest="goldens_run",
                    help="Add one test per case per engine of the models.yaml, and the reference's own.")
    group.addoption("--goldens-engine", action="append", default=[], dest="goldens_engines", metavar="E[@VERSION]",
                    help="Replay through this engine (repeatable; default: each model's engines).")
    group.addoption("--goldens-model", action="append", default=[], dest="goldens_models", metavar="MODEL",
                    help="Only this model (repeatable).")
    group.addoption("--goldens-config", default="models.yaml", dest="goldens_config", metavar="PATH",
                    help="The model matrix (default: models.yaml in pytest's rootdir).")
    group.addoption("--goldens-dir", default="goldens", dest="goldens_dir", metavar="DIR",
                    help="The directory of golden files (default: goldens in pytest's rootdir).")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STATE] = _State(config)
    config.addinivalue_line(
        "markers", "server(kind, model): the test uses the session's managed server of that kind "
                   "for that model; it is stopped after the last such test")


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        state.close()


@pytest.fixture(scope="session")
def goldens_config(pytestconfig):
    """The matrix (--goldens-config, default models.yaml)."""
    return pytestconfig.stash[_STATE].matrix


@pytest.fixture(scope="session")
def goldens_pool(pytestconfig):
    """The session's EnginePool: it owns every managed server and stops them at the end."""
    state = pytestconfig.stash[_STATE]
    yield state.open_pool()
    state.close()


# ------------------------------------------------------------------------------ --goldens items

class GoldensFailure(Exception):
    """A case that did not hold: its report is the judge's detail, not a traceback."""


class GoldensFile(pytest.File):
    """models.yaml as a collector of its cases."""

    def collect(self):
        from generator.config import engine_registry, engine_spec
        from generator.config.cases import model_cases, replays

        state = self.config.stash[_STATE]
        matrix = state.matrix
        chosen = tuple(self.config.getoption("goldens_engines"))
        specs = [engine_spec.parse(text) for text in chosen]
        for model in matrix.select(self.config.getoption("goldens_models")):
            cases = model_cases(model)
            for case in cases:
                yield ReferenceItem.from_parent(self, name=f"{case.id}[reference]", case=case)
            for spec in specs or [engine_spec.parse(name) for name in model.engines]:
                if spec.name not in model.engines and not chosen:
                    continue
                for case in cases:
                    if not replays(case, spec.name):
                        continue
                    item = ReplayItem.from_parent(self, name=f"{case.id}[{spec.label}]", case=case, spec=spec)
                    server = engine_registry.declared(spec.name).server
                    if server is not None and server.one_model_at_a_time:
                        item.add_marker(pytest.mark.server(server.kind, case.model))
                    yield item


class _GoldensItem(pytest.Item):
    def __init__(self, *, case, **kwargs):
        super().__init__(**kwargs)
        self.case = case

    @property
    def state(self) -> _State:
        return self.config.stash[_STATE]

    @property
    def root(self) -> Path:
        return self.state.path("goldens_dir")

    def reportinfo(self):
        return self.path, None, self.name

    def repr_failure(self, excinfo, style=None):
        from generator.errors import GoldensError

        if isinstance(excinfo.value, (GoldensFailure, GoldensError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def golden(self):
        from generator.goldens import golden_file

        path = golden_file.golden_path(self.root, self.case.id)
        if not path.is_file():
            raise GoldensFailure(f"{path}: no golden; run `goldens regenerate` (or pytest --goldens --snapshot-update)")
        return golden_file.read(path)


class ReferenceItem(_GoldensItem):
    """The reference renders the committed golden, byte for byte; --snapshot-update writes it."""

    def runtest(self):
        from generator import files
        from generator.engines import Ids, Refused
        from generator.goldens import golden_file, regenerate
        from generator.replay import judge

        matrix = self.state.matrix
        source = self.state.source(self.case.model)
        item = regenerate.reference_golden(self.case, source, matrix, regenerate.provenance(source, matrix))
        data = golden_file.dumps(item)
        path = golden_file.golden_path(self.root, self.case.id)
        if self.config.getoption("update_snapshots", default=False):
            files.atomic_write(path, data)
            return
        old = self.golden()
        if path.read_text(encoding="utf-8") == data:
            return
        got = Refused(item.error) if item.outcome == "error" else Ids(item.ids, item.prompt, item.pieces)
        outcome = judge.verdict(old, None, "regenerate", got)  # the golden, then the render now
        if not outcome.ok:
            raise GoldensFailure(outcome.detail)
        raise GoldensFailure(f"{path}: the ids match but the golden's other bytes (provenance, analyses, "
                             f"error text) are not what `goldens regenerate` writes now; run it and review")


class ReplayItem(_GoldensItem):
    """One engine's answer to one case, judged as `goldens check` judges it."""

    def __init__(self, *, spec, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec

    def runtest(self):
        from generator.replay import judge

        golden = self.golden()
        key = (self.spec.label, self.case.model)
        state = self.state
        engine = state.engines.get(key)
        if engine is None:
            model = state.matrix.models[self.case.model]
            engine = state.open_pool().engine(self.spec, model, state.source(self.case.model))
            state.engines[key] = engine
        outcome = judge.judge(engine, golden, self.root, label=self.spec.label)
        if not outcome.ok:
            raise GoldensFailure(outcome.detail)


def _marked(item) -> list[tuple[str, str]]:
    return [tuple(mark.args) for mark in item.iter_markers("server")]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """With --goldens, the models.yaml's items join the suite (before -k/-m select). Then the
    tests of each model's vLLM server run together (in file order otherwise) and are counted,
    so that server starts once and stops after the last one."""
    state = config.stash[_STATE]
    if config.getoption("goldens_run"):
        from generator.errors import GoldensError, one_line

        try:
            collector = GoldensFile.from_parent(session, path=state.path("goldens_config"))
            items.extend(collector.collect())
        except GoldensError as error:  # a bad models.yaml or --goldens-engine: one line, no traceback
            raise pytest.UsageError(f"goldens: error: {one_line(str(error))}") from None
    from generator.config import engine_registry

    one_at_a_time = engine_registry.one_model_at_a_time()
    groups: dict[tuple[str, str], list] = {}
    order: list[list] = []
    for item in items:
        heavy = [(kind, model) for kind, model in _marked(item) if kind in one_at_a_time]
        if not heavy:
            order.append([item])
        elif heavy[0] in groups:
            groups[heavy[0]].append(item)
        else:
            groups[heavy[0]] = [item]
            order.append(groups[heavy[0]])
    items[:] = [item for group in order for item in group]
    state.uses.clear()
    state.uses.update(key for item in items for key in _marked(item))


def pytest_runtest_teardown(item, nextitem):
    state = item.config.stash[_STATE]
    for key in _marked(item):
        state.uses[key] -= 1
        if state.uses[key] == 0 and state.pool is not None:
            kind, model = key
            state.pool.release(model, kind)
            state.engines = {k: v for k, v in state.engines.items() if not (k[1] == model and kind in k[0])}
