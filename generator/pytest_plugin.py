"""The goldens pytest plugin (entry point `pytest11`): a team's own suite replays its goldens.

`pytest --goldens` adds, from the team's models.yaml, one test per case per engine
(`models.yaml::qwen3/plain[llama-server]`; `--goldens-engine E[@VERSION]` picks the engines,
default each model's own) judged by the same judge as `goldens check`, and one `[reference]`
test per case: the reference renders the committed golden byte for byte. The items are collected
as pytest collects a file (the models.yaml, added to the arguments when none names it), so the
collected count, printed node ids passed back, `--lf`/`--ff` and -k all behave as for any test.
Goldens rendered from another template or tokenizer than the sources hold now are a collection
error naming them and the fix (exit 2), not a failure per case. Under syrupy's `--snapshot-update`
(or pytest-regressions' `--force-regen`) the reference tests do what `goldens regenerate` does:
the goldens written in its bytes, orphans removed, the index recorded, and its summary line
printed (an engine's answer never becomes a golden: `goldens ledger` records one). Each item's
shared preparation (the model's sources, an engine's server) is its setup phase, not its call.
Where the reference stack installed is not its pins (beside vLLM), the reference renders in the
venv at the pins (servers/transformers_reference.py) and the transformers engine runs at its pin.

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
        self.update = None  # snapshot.Update under --snapshot-update / --force-regen with --goldens
        self.at_pins: str | None = None  # the releases here that are not the pins (the reference then renders there)
        self.pinned: dict[str, dict[str, str]] = {}  # model -> case id -> golden text rendered at the pins
        self.outcomes: dict[tuple[str, str], list] = {}  # (engine label, model) -> the outcomes judged so far

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
            from generator.goldens.inputs import resolve_sources

            self.sources.update(resolve_sources(self.matrix, [self.matrix.models[model]]))
        return self.sources[model]

    def pinned_golden(self, case):
        """The case's golden as rendered in the venv at the pins (the whole model at once)."""
        from generator.goldens import golden_file
        from generator.servers import transformers_reference

        if case.model not in self.pinned:
            self.pinned[case.model] = transformers_reference.render_at_pins(self.path("goldens_config"), case.model)
        return golden_file.loads(self.pinned[case.model][case.id], f"{case.id} rendered at the pins")

    def runs_as(self, spec):
        """The engine as it will run: at the pins (the releases here are not the reference's),
        the installed Transformers' place is taken by the reference engine at its pin, in its
        worker's venv, as `goldens check` runs it."""
        if self.at_pins is None or spec.name != "transformers" or spec.version is not None:
            return spec
        from generator.config.engine_spec import EngineSpec
        from generator.servers import transformers_reference

        return EngineSpec("transformers", transformers_reference.PINS["transformers"])

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
    group.addoption("--goldens-durations", default=None, dest="goldens_durations", metavar="FILE",
                    help="Write each goldens test's seconds into FILE, pytest-split's format (others kept), "
                         "the setup its model and engine share spread over the tests that share it.")
    import importlib.util

    if importlib.util.find_spec("pytest_regressions") is None:  # else it is pytest-regressions' own
        group.addoption("--force-regen", action="store_true", default=False, dest="force_regen",
                        help="With --goldens: rewrite the goldens as `goldens regenerate` does "
                             "(pytest-regressions' spelling of --snapshot-update).")


def updating(config: pytest.Config) -> bool:
    """--snapshot-update (syrupy) or --force-regen (pytest-regressions): regenerate the goldens."""
    return bool(config.getoption("update_snapshots", default=False) or
                config.getoption("force_regen", default=False))


def pytest_configure(config: pytest.Config) -> None:
    state = config.stash[_STATE] = _State(config)
    config.addinivalue_line(
        "markers", "server(kind, model): the test uses the session's managed server of that kind "
                   "for that model; it is stopped after the last such test")
    if not config.getoption("goldens_run"):
        return
    from generator.errors import GoldensError, one_line
    from generator.servers import transformers_reference

    differ = transformers_reference.moved()
    if differ:  # other releases here: the reference renders in the venv at the pins instead
        shown = ", ".join(f"{name} {here or 'absent'} (pinned {transformers_reference.PINS[name]})"
                          for name, here in differ.items())
        state.at_pins = shown
    try:  # bad options: one usage error before any test (exit 4), never one error per test
        _check_options(config, state)
    except GoldensError as error:
        raise pytest.UsageError(f"goldens: error: {one_line(str(error))}") from None
    if config.getoption("goldens_durations"):
        path = Path(config.getoption("goldens_durations"))
        config.pluginmanager.register(_Durations(path if path.is_absolute() else config.invocation_params.dir / path),
                                      "goldens-durations")
    if updating(config):
        from generator.replay.judging.snapshot import Update

        state.update = Update(state.matrix, state.path("goldens_dir"), record_index=state.at_pins is None)
    target = state.path("goldens_config").resolve()
    if not any(_covers(config, arg, target) for arg in config.args):
        config.args.append(str(target))  # collected as any test file is: counted, selectable


def _check_options(config: pytest.Config, state: _State) -> None:
    """What `goldens check` refuses before a run, refused before collection (issue 44: an
    unpublished `transformers@99.0.0` was 20 test errors, `--goldens-dir /nonexistent` 40
    failures, `--goldens-durations DIR` a traceback after every test had passed): the models
    and engines named, an engine version that cannot run here, the goldens folder, the
    durations file's path."""
    from generator.config import engine_spec
    from generator.engines.pool import check_available
    from generator.errors import GoldensError
    from generator.replay.reporting import destination

    state.matrix.select(tuple(config.getoption("goldens_models")))
    for text in config.getoption("goldens_engines"):
        check_available(engine_spec.parse(text), state.matrix.engine_versions)
    folder = state.path("goldens_dir")
    if not folder.is_dir() and not (updating(config) and not folder.exists()):
        what = "is not a folder" if folder.exists() else "does not exist"
        raise GoldensError(f"--goldens-dir {folder}: {what} (goldens regenerate writes one)")
    if config.getoption("goldens_durations"):
        path = Path(config.getoption("goldens_durations"))
        destination.check_destination(path if path.is_absolute() else config.invocation_params.dir / path)


def _covers(config: pytest.Config, arg: str, target: Path) -> bool:
    """True when the argument (a path, a node id) is or holds the models.yaml."""
    path = Path(arg.partition("[")[0].split("::")[0])
    path = (path if path.is_absolute() else config.invocation_params.dir / path).resolve()
    return path == target or (path.is_dir() and target.is_relative_to(path))


def pytest_collect_file(file_path: Path, parent):
    """With --goldens, the models.yaml is a file of tests."""
    state = parent.config.stash[_STATE]
    if parent.config.getoption("goldens_run") and file_path.resolve() == state.path("goldens_config").resolve():
        return GoldensFile.from_parent(parent, path=file_path)
    return None


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


class StaleGoldens(Exception):
    """Goldens rendered from other sources: one line per model, the fix named."""


class GoldensFile(pytest.File):
    """models.yaml as a collector of its cases."""

    def repr_failure(self, excinfo, style=None):
        from generator.errors import GoldensError, one_line

        if isinstance(excinfo.value, StaleGoldens):
            return str(excinfo.value)
        if isinstance(excinfo.value, GoldensError):
            return f"goldens: error: {one_line(str(excinfo.value))}"
        return super().repr_failure(excinfo, style=style)

    def collect(self):
        from generator.config import engine_registry, engine_spec
        from generator.config.cases import PARSE, all_cases, replays

        state = self.config.stash[_STATE]
        matrix = state.matrix
        chosen = tuple(self.config.getoption("goldens_engines"))
        specs = [engine_spec.parse(text) for text in chosen]
        selected = matrix.select(tuple(self.config.getoption("goldens_models")))
        if state.update is None:  # updating is the fix for stale goldens, not their error
            from generator.goldens import staleness

            for model in selected:
                state.source(model.name)
            stale = staleness.find(matrix, state.path("goldens_dir"), [m.name for m in selected], state.sources)
            if stale:
                raise StaleGoldens("\n".join(f"goldens: error: {item.line()}" for item in stale))
        for model in selected:
            cases = all_cases(model)
            for case in cases:
                yield ReferenceItem.from_parent(self, name=f"{case.id}[reference]", case=case,
                                                nodeid=f"{self.nodeid}::{case.id}[reference]")
            # the reference's own findings, judged as `goldens check` judges them (its `invariants` column)
            yield InvariantsItem.from_parent(self, name=f"{model.name}[invariants]", case=cases[0],
                                             nodeid=f"{self.nodeid}::{model.name}[invariants]")
            for spec in specs or [engine_spec.parse(name) for name in model.engines]:
                if spec.name not in model.engines and not chosen:
                    continue
                server = engine_registry.declared(spec.name).server
                group = GroupItem.from_parent(self, name=f"{model.name}[{spec.label} group]", case=cases[0],
                                              spec=spec, nodeid=f"{self.nodeid}::{model.name}[{spec.label} group]")
                parses = engine_registry.parses_as(state.runs_as(spec))  # a worker at the pins parses nothing
                asked = [case for case in cases if replays(case, spec.name, model) and (parses or case.axis != PARSE)]
                group.expected = len(asked)
                for case in asked:
                    # the node id spelled out, so pytest reads its [...] as parameters, as it
                    # reads a printed id passed back (--lf's record, a node id argument)
                    item = ReplayItem.from_parent(self, name=f"{case.id}[{spec.label}]", case=case, spec=spec,
                                                  nodeid=f"{self.nodeid}::{case.id}[{spec.label}]")
                    if server is not None and server.one_model_at_a_time:
                        item.add_marker(pytest.mark.server(server.kind, case.model))
                    yield item
                if server is not None and server.one_model_at_a_time:
                    group.add_marker(pytest.mark.server(server.kind, model.name))
                yield group


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

    def shares(self) -> tuple:
        """What this item's setup prepares for the others: the model's sources (reference), the
        engine for the model (replay). Its cost is paid by whichever of them runs first."""
        return ("reference", self.case.model)

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

    def setup(self):
        """The model's sources and tokenizer, loaded once for all its cases: the first case's
        setup, so its call measures its own render (pytest --durations shows which is which)."""
        if self.state.at_pins is not None:
            self.state.pinned_golden(self.case)
            return
        from generator import reference

        reference.load_tokenizer(self.state.source(self.case.model).tokenizer_dir)

    def runtest(self):
        from generator.engines import Ids, Refused
        from generator.goldens import golden_file, regenerate
        from generator.replay.judging import verdict

        matrix = self.state.matrix
        source = self.state.source(self.case.model)
        if self.state.at_pins is not None:
            item = self.state.pinned_golden(self.case)
        else:
            item = regenerate.reference_golden(self.case, source, matrix, regenerate.provenance(source, matrix))
        if self.state.update is not None:
            self.state.update.rendered_case(item, source)
            return
        data = golden_file.dumps(item)
        path = golden_file.golden_path(self.root, self.case.id)
        old = self.golden()
        if path.read_text(encoding="utf-8") == data:
            return
        got = Refused(item.error) if item.outcome == "error" else Ids(item.ids, item.prompt, item.pieces)
        outcome = verdict.verdict(old, None, "regenerate", got)  # the golden, then the render now
        if not outcome.ok:
            raise GoldensFailure(outcome.detail)
        raise GoldensFailure(f"{path}: the ids match but the golden's other bytes (provenance, analyses, "
                             f"error text) are not what `goldens regenerate` writes now; run it and review")


class ReplayItem(_GoldensItem):
    """One engine's answer to one case, judged as `goldens check` judges it."""

    def __init__(self, *, spec, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec

    def shares(self) -> tuple:
        return (self.spec.label, self.case.model)

    def setup(self):
        """The engine (a server started, a venv made) once per engine and model: the first
        case's setup, not its call."""
        key = (self.spec.label, self.case.model)
        state = self.state
        if key not in state.engines:
            model = state.matrix.models[self.case.model]
            state.engines[key] = state.open_pool().engine(state.runs_as(self.spec), model,
                                                          state.source(self.case.model))

    def runtest(self):
        from generator.replay.judging import gate, judge

        golden = self.golden()
        engine = self.state.engines[(self.spec.label, self.case.model)]
        reviews = self.state.matrix.models[self.case.model].disputes
        outcome = gate.gated(judge.judge(engine, golden, self.root, label=self.spec.label, reviews=reviews),
                             self.state.matrix.gate)
        self.state.outcomes.setdefault((self.spec.label, self.case.model), []).append(outcome)
        if not outcome.ok:
            raise GoldensFailure(outcome.detail)


class InvariantsItem(_GoldensItem):
    """The model's invariant findings against models.yaml's `invariants:` review: the failing
    outcomes `goldens check` puts in its `invariants` column (replay/running/check.py), nothing else."""

    def runtest(self):
        from generator.config.cases import model_cases
        from generator.replay.running import check

        model = self.state.matrix.models[self.case.model]
        case_ids = [c.id for c in model_cases(model)]
        found, _ = check.invariant_outcomes(self.root, model, case_ids)
        found += check.dispute_outcomes(self.root, model, case_ids)
        if found:
            raise GoldensFailure("\n".join(f"DRIFT {o.case} [{o.engine}]: {o.detail}" for o in found))


class GroupItem(_GoldensItem):
    """What `goldens check` judges of a (model, engine) group as a whole, after its cases: an
    engine that refused every case judged nothing (an error), and a reviewed cause no case of
    the group showed is stale."""

    expected = 0

    def __init__(self, *, spec, **kwargs):
        super().__init__(**kwargs)
        self.spec = spec

    def runtest(self):
        from generator.replay.running import check

        outcomes = self.state.outcomes.get((self.spec.label, self.case.model), [])
        if len(outcomes) < self.expected:
            pytest.skip(f"only {len(outcomes)} of the group's {self.expected} cases ran: the group is judged whole")
        problems = [o for o in check.all_refused(self.case.model, self.spec.label, list(outcomes))
                    if o.status == "error"]
        problems += check.stale_causes(self.root, self.case.model, self.spec.name, self.spec.label, outcomes)
        if problems:
            raise GoldensFailure("\n".join(f"{o.status.upper()} {o.case} [{o.engine}]: {o.detail}" for o in problems))


def _marked(item) -> list[tuple[str, str]]:
    return [tuple(mark.args) for mark in item.iter_markers("server")]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """The tests of each model's vLLM server run together (in file order otherwise) and are
    counted, so that server starts once and stops after the last one."""
    state = config.stash[_STATE]
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


def pytest_collection_finish(session):
    """Under an update, the reference tests selected (after -k, -m, --lf): each model's goldens
    are written when its last one has run."""
    state = session.config.stash[_STATE]
    if state.update is not None:
        state.update.expect(item.case.id for item in session.items if isinstance(item, ReferenceItem))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """What the update wrote, as `goldens regenerate` says it; goldens no case judges, as check
    says them."""
    state = config.stash.get(_STATE, None)
    if state is not None and config.getoption("goldens_run") and state.update is None:
        from generator.replay.running import orphans

        for line in orphans.note(state.matrix, state.path("goldens_dir"), config.getoption("goldens_models")):
            terminalreporter.write_line(f"goldens: {line}")
        from generator.replay.reporting.report import Summary
        from generator.replay.reporting.terminal import known_lines

        # a known divergence passes; what explained it is said as `goldens check` says it
        summary = Summary([o for outcomes in state.outcomes.values() for o in outcomes])
        for line in known_lines(summary) + ([summary.class_line()] if summary.class_line() else []):
            terminalreporter.write_line(f"goldens: {line}")
    if state is not None and state.update is not None:
        for line in state.update.lines():
            terminalreporter.write_line(line)



class _Durations:
    """--goldens-durations FILE: each goldens test's own call and teardown seconds plus an equal
    share of the setup it shares with others (the model's sources and tokenizer, an engine's
    server), written in pytest-split's format. pytest-split balances groups by these seconds;
    with the setup all on the first test it would put that test alone in a group, while every
    group in fact pays the setup of each model and engine it runs."""

    def __init__(self, path: Path):
        self.path = path
        self.shares: dict[str, tuple] = {}  # node id -> what its setup prepares
        self.seconds: collections.Counter = collections.Counter()  # node id -> call + teardown
        self.shared: dict[tuple, list] = {}  # what a setup prepares -> [setup seconds, node ids]

    def pytest_collection_finish(self, session):
        self.shares = {item.nodeid: item.shares() for item in session.items if isinstance(item, _GoldensItem)}

    def pytest_runtest_logreport(self, report):
        key = self.shares.get(report.nodeid)
        if key is None:
            return
        if report.when == "setup":
            entry = self.shared.setdefault(key, [0.0, []])
            entry[0] += report.duration
            entry[1].append(report.nodeid)
        else:
            self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session):
        import json

        from generator import files

        if not self.shared:
            return
        durations: dict[str, float] = {}
        if self.path.is_file():
            try:
                durations = {str(k): float(v) for k, v in json.loads(self.path.read_text(encoding="utf-8")).items()}
            except (ValueError, AttributeError, TypeError):
                durations = {}  # not pytest-split's format: written anew
        for setup, node_ids in self.shared.values():
            for node_id in node_ids:
                durations[node_id] = round(self.seconds[node_id] + setup / len(node_ids), 6)
        files.atomic_write(self.path, json.dumps(dict(sorted(durations.items())), indent=2) + "\n")


def pytest_report_header(config):
    state = config.stash.get(_STATE, None)
    if state is not None and state.at_pins is not None:
        return [f"goldens: the reference renders in its venv at the pins: here {state.at_pins}"]
    return None
