"""The render budget (generator/budget.py): a hostile template costs its run one line, never a
hung gate, a killed process, a template wrongly blamed or a golden that depends on the machine.

The check tests run goldens in its own process on a one-model config whose `tools` case never
ends: in Python code (issue 34) or inside one C call, a big-integer power (issue 44). Since a
render that does not end can never be a golden (regenerate refuses it), their goldens are made
from a template that ends and then given the hostile template's digest, as a golden committed
before the template changed under a check would carry it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import one_line_error

from generator import budget
from generator.cli import main
from generator.errors import EngineError
from generator.goldens import golden_file
from faults import wait_for
from interrupt import catches, interruptible

ROOT = Path(__file__).resolve().parent.parent
LOOP = ("{%- if tools %}{%- for i in range(100000) %}{%- for j in range(100000) %}{%- endfor %}"
        "{%- endfor %}{%- endif %}{{ messages[0].content }}")
# one C call: CPython's power of big integers, which no asynchronous exception interrupts
POWER = "{%- set x = 7 ** (((tools or [])|length) * 300000000) %}{{ messages[0].content }}"
HOSTILE = {"loop": LOOP, "power": POWER}


def _config(folder: Path, template: str) -> Path:
    (folder / "t.jinja").write_text(template)
    (folder / "models.yaml").write_text(
        "date: 2026-01-15\nmodels:\n  m:\n    tokenizer: {pack: \"npm:qwen3\"}\n"
        "    template: {file: t.jinja}\n    shapes: {only: [plain, tools]}\n"
        "    engines: [transformers, minijinja]\n")
    return folder


def _goldens(*args, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "generator.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _under(folder: Path, template: str) -> Path:
    """The config's goldens, rendered from a template that ends, then `template` in its place
    with the goldens naming its digest (so check does not call them stale)."""
    done = _goldens("regenerate", cwd=folder)
    assert done.returncode == 0, done.stderr
    (folder / "t.jinja").write_text(template)
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    for path in (folder / "goldens" / "m").glob("*.json"):
        data = json.loads(path.read_text())
        data["provenance"]["template_sha256"] = digest
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return folder


@pytest.fixture(scope="module", params=sorted(HOSTILE))
def hostile(request, tmp_path_factory) -> tuple[str, Path]:
    folder = _config(tmp_path_factory.mktemp(request.param), "{{ messages[0].content }}")
    return request.param, _under(folder, HOSTILE[request.param])


@pytest.mark.slow
def test_a_check_ends_within_the_runs_timeout_whatever_the_render_sits_in(hostile):
    kind, folder = hostile
    started = time.monotonic()
    done = _goldens("check", "--engine", "transformers", "--timeout", "12", cwd=folder, timeout=120,
                    env={"GOLDENS_RENDER_DEADLINE": "600"})
    elapsed = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    # the start-up (imports, the tokenizer) comes on top; without the bound it never ends
    assert elapsed < 12 + 45, f"check ({kind}) took {elapsed:.1f} s for --timeout 12"
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "not judged: the run's --timeout was reached while the template rendered" in done.stderr


@pytest.mark.slow
def test_minijinja_running_out_of_fuel_is_not_judged_not_a_refusal(hostile):
    """Fuel is goldens' budget, not the engine refusing: the case is an error (exit 2)."""
    kind, folder = hostile
    if kind != "loop":  # MiniJinja's integers overflow at once on the power: its own refusal
        done = _goldens("check", "--engine", "minijinja", cwd=folder, timeout=120)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
        return
    done = _goldens("check", "--engine", "minijinja", cwd=folder, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "not judged: the template did not finish rendering within goldens' budget" in done.stdout + done.stderr
    line = next(line for line in done.stderr.splitlines() if "[minijinja]" in line and "m/tools" in line)
    assert line.startswith("goldens: error:") and "refused" not in line, line


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_a_signal_ends_a_check_stuck_in_a_render_at_once(hostile, signum):
    # neither the run's timeout nor the render's deadline can end it within the test: only the
    # signal. SIGINT at its default in the check even when this run was started with it ignored
    kind, folder = hostile
    process = interruptible([sys.executable, "-m", "generator.cli", "check", "--engine", "transformers",
                             "--timeout", "600"], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "GOLDENS_RENDER_DEADLINE": "600",
                                 "PYTHONFAULTHANDLER": "1"})
    try:
        # the plain case renders in milliseconds after the imports: a process that has burnt
        # 8 s of CPU is inside the hostile render
        assert wait_for(lambda: _cpu_seconds(process.pid) > 8, timeout=120), "check never got busy"
        assert catches(process.pid, signum), "the check does not take the signal"
        process.send_signal(signum)
        started = time.monotonic()
        try:
            _, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say where every thread sat
            process.send_signal(signal.SIGABRT)
            _, stderr = process.communicate(timeout=30)
            raise AssertionError(f"the signal did not end the check; its threads:\n{stderr}") from None
        # at once: seconds even on a loaded machine, where the render alone would run 600 s
        assert time.monotonic() - started < 60, stderr
    finally:
        process.kill()
    assert process.returncode == 128 + signum, stderr
    assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize("seconds", ["0.0001", "0.05", "2"])
@pytest.mark.slow
def test_a_render_deadline_is_never_a_recorded_outcome(tmp_path, seconds):
    """Issue 44: GOLDENS_RENDER_DEADLINE=0.0001 rewrote real goldens as RenderDeadline errors, exit
    0. How long a render may take is the machine's: exit 2, one line naming the case, and not a
    file written, whatever the value (a tiny one cuts every case; 2 s only the looping one)."""
    folder = _config(tmp_path, LOOP)
    done = _goldens("regenerate", cwd=folder, env={"GOLDENS_RENDER_DEADLINE": seconds})
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("goldens: error: m"), done.stderr  # the model or its case
    assert f"did not finish rendering within {float(seconds):g} s" in lines[0] and "nothing written" in lines[0]
    assert not (folder / "goldens").exists(), sorted(p.name for p in (folder / "goldens").rglob("*"))


def test_a_render_is_refused_off_the_main_thread():
    """No bound reaches a C call on another thread (issue 44): such a render is never begun there."""
    seen: list[BaseException] = []

    def render() -> None:
        try:
            with budget.deadline():
                seen.append(AssertionError("the render began"))
        except BaseException as error:  # noqa: BLE001 (what the thread saw is the test)
            seen.append(error)

    worker = threading.Thread(target=render)
    worker.start()
    worker.join(10)
    assert len(seen) == 1 and isinstance(seen[0], EngineError), seen
    assert "off the main thread" in str(seen[0])


@pytest.mark.parametrize("call", ["power", "loop"])
def test_the_deadline_cuts_a_render_inside_one_c_call_on_the_main_thread(monkeypatch, call):
    """The signal's handler runs inside CPython's big-integer loops: a whole power of big
    integers is one C call (the case an asynchronous exception never reached)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "0.3")
    source = {"power": "{{ (7 ** (n * 300000000)) > 1 }}",
              "loop": "{% for i in range(100000) %}{% for j in range(n * 100000) %}{% endfor %}{% endfor %}"}[call]
    template = ImmutableSandboxedEnvironment().from_string(source)
    started = time.monotonic()
    with pytest.raises(budget.RenderDeadline, match="within 0.3 s"):
        with budget.deadline():
            template.render(n=1)
    assert time.monotonic() - started < 10


def test_the_runs_deadline_is_not_blamed_on_the_template(monkeypatch):
    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "60")
    with pytest.raises(budget.RunDeadline) as caught:
        with budget.deadline(time.monotonic() + 0.3):
            while True:
                pass
    assert not isinstance(caught.value, budget.RenderDeadline)


def test_a_render_that_ends_in_time_leaves_nothing_behind(monkeypatch):
    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "0.2")
    with budget.deadline():
        sum(range(1000))
    past = time.monotonic() + 0.5  # running Python past the deadline: a stray alarm would land here
    while time.monotonic() < past:
        pass


def test_running_out_of_memory_is_the_machines_not_the_templates():
    with pytest.raises(budget.OutOfMemory, match="ran out of memory"):
        with budget.deadline():
            raise MemoryError


@pytest.mark.slow
def test_a_render_asked_from_another_thread_goes_to_a_worker_that_ends_in_time(tmp_path, monkeypatch):
    """A replay pool's thread (a release search's, a plugin's) cannot bound a render in this
    process: TransformersEngine sends it to a worker process on this interpreter, whose parent
    kills it at the run's deadline plus HARD_GRACE, whatever it is doing; the next render starts
    a fresh worker."""
    from generator.config import models
    from generator.engines.transformers.engine import TransformersEngine
    from generator.sources.source import resolve

    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "600")  # the worker's own signal never comes
    config = models.load(_config(tmp_path, POWER) / "models.yaml")
    source = resolve(config.models["m"], config)
    engine = TransformersEngine(source, config.date)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    seen: list[object] = []

    def ask(request: dict, within: float) -> None:
        started = time.monotonic()
        try:  # the run's deadline is the engine's own, as EngineContext.until hands it on
            seen.append(list(TransformersEngine(source, config.date, until=time.monotonic() + within).ids(request)))
        except BaseException as error:  # noqa: BLE001 (what the thread saw is the test)
            seen.append(error)
        seen.append(time.monotonic() - started)

    try:
        first = threading.Thread(target=ask, args=({"messages": [{"role": "user", "content": "hi"}], "tools": tools}, 2))
        first.start()
        first.join(60)
        assert not first.is_alive() and isinstance(seen[0], budget.RunDeadline), seen
        assert 2 <= seen[1] < 2 + budget.HARD_GRACE + 10, seen
        second = threading.Thread(target=ask, args=({"messages": [{"role": "user", "content": "hi"}]}, 60))
        second.start()
        second.join(60)
        assert seen[2] == list(engine.ids({"messages": [{"role": "user", "content": "hi"}]})), seen
    finally:
        engine.close()


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "-1", "0", "soon"])
def test_a_bad_render_deadline_is_one_line_not_a_template_error(value):
    result = CliRunner(env={"GOLDENS_RENDER_DEADLINE": value}).invoke(
        main, ["models", "--config", str(ROOT / "models.yaml")])  # in this process: no interpreter start per value
    assert one_line_error(result).startswith("goldens: error: GOLDENS_RENDER_DEADLINE="), result.stderr


@pytest.mark.slow
def test_a_huge_prompt_is_recorded_before_anything_tokenizes_it(tmp_path):
    """Unlike a deadline, the size bound is the same on every machine: the template's outcome."""
    folder = _config(tmp_path, '{% if tools %}{{ "{:>100000000}".format(1) }}{% endif %}'
                               '{{ messages[0].content }}')
    done = _goldens("regenerate", cwd=folder, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    golden = golden_file.read(folder / "goldens" / "m" / "tools.json")
    assert golden.outcome == "error" and "PromptTooLarge" in golden.error, golden.error
    assert (folder / "goldens" / "m" / "tools.json").stat().st_size < 1 << 20


@pytest.mark.slow
def test_too_many_tokens_are_recorded_before_any_piece_is_made(tmp_path):
    """Issue 44: 4 MiB of prompt made a 108 MB golden in 5 min 42 s and 1.3 GB, then refused it
    as more than check reads back. 1.5 M digits (one token each) are under the character bound
    and over the token bound: refused as soon as they are tokenized."""
    folder = _config(tmp_path, '{% if tools %}{% for i in range(100000) %}123456789012345{% endfor %}{% endif %}'
                               '{{ messages[0].content }}')
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = _goldens("regenerate", cwd=folder, timeout=600)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    golden = golden_file.read(folder / "goldens" / "m" / "tools.json")
    assert golden.outcome == "error" and "PromptTooLarge" in golden.error and "tokens" in golden.error, golden.error
    assert (folder / "goldens" / "m" / "tools.json").stat().st_size < 1 << 20
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert cpu < 60, f"{cpu:.0f} s of CPU to refuse it"  # measured 11 s here


def test_a_library_that_swallows_the_deadline_is_cut_again(monkeypatch):
    """Jinja's constant folding takes any Exception as "cannot fold" and computes the constant
    again at code generation, with the deadline's one signal spent: `{{ 7 ** 300000000 }}` in a
    template compiled for ever. The signal is a BaseException, raised again until the block ends."""
    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "0.3")
    started = time.monotonic()
    with pytest.raises(budget.RenderDeadline):
        with budget.deadline():
            for _ in range(3):
                try:
                    while True:
                        pass
                except Exception:  # noqa: BLE001 (what a careless library does)
                    pass
    assert time.monotonic() - started < 10


def test_the_runs_deadline_is_no_process_global():
    """Issue 43: the run's deadline was a module global (budget.run set it), so two runs in one
    process (pytest, a library user) saw each other's. It is handed down now: no module of the
    generator keeps a deadline with a `global` statement, and budget keeps none at all."""
    import ast

    found = []
    for path in sorted((ROOT / "generator").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Global):
                found += [f"{path.relative_to(ROOT)}: global {name}" for name in node.names
                          if path.name == "budget.py" or "until" in name.lower() or "deadline" in name.lower()]
    assert found == []
    assert not hasattr(budget, "run")


def test_two_runs_in_one_process_each_keep_their_own_deadline(tmp_path, monkeypatch):
    """Engines built for three runs alive at once (an hour's --timeout, one of 0.1 s, none) each
    render within their own run's deadline, whichever was made last: the deadline reaches a
    render through the engine's EngineContext (its transport's `until`), not through the process."""
    from generator import http
    from generator.config import models
    from generator.engines import EngineContext
    from generator.engines.transformers.engine import TransformersEngine, open_engine
    from generator.sources.source import resolve

    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "0.25")  # each cut render spends it all
    config = models.load(_config(tmp_path, LOOP) / "models.yaml")
    source = resolve(config.models["m"], config)

    def engine(transport: http.Transport) -> TransformersEngine:
        context = EngineContext(name="transformers", model="m", source=source, date=config.date, transport=transport)
        built = open_engine(context)
        assert isinstance(built, TransformersEngine) and built.until == context.until == transport.until
        return built

    short = engine(http.DEFAULT.bounded_by(run=0.1))
    far = engine(http.DEFAULT.bounded_by(run=3600))
    none = engine(http.DEFAULT)
    assert short.until < far.until and none.until is None
    looping = {"messages": [{"role": "user", "content": "hi"}],
               "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
    for built, expected in [(far, budget.RenderDeadline), (short, budget.RunDeadline),
                            (none, budget.RenderDeadline), (short, budget.RunDeadline)]:
        started = time.monotonic()
        with pytest.raises(EngineError) as caught:
            built.ids(looping)
        assert type(caught.value) is expected, (built.until, caught.value)
        assert time.monotonic() - started < 10
    assert list(far.ids({"messages": [{"role": "user", "content": "hi"}]}))  # a template that ends still renders


@pytest.mark.slow
@pytest.mark.parametrize("lent", [False, True], ids=["own-pool", "lent-pool"])
def test_a_checks_timeout_bounds_an_in_process_render(hostile, monkeypatch, lent):
    """`check --timeout` run in this process (as pytest's plugin and a library user run it) ends
    a render stuck in the template: the run's transport carries the deadline to the engine it
    opens, a lent pool's too (that pool's own transport has no deadline)."""
    from generator.config import models
    from generator.engines.pool import EnginePool
    from generator.replay.running import check

    kind, folder = hostile
    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "600")
    config = models.load(folder / "models.yaml")
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(EnginePool(config.date, {}, versions=config.engine_versions)) if lent else None
        results = check.run(config, folder / "goldens", engines=("transformers",), timeout=10, pool=pool)
    elapsed = time.monotonic() - started
    assert elapsed < 10 + 30, f"check ({kind}) took {elapsed:.1f} s for --timeout 10"
    stuck = [o for o in results.outcomes if o.case == "m/tools" and o.engine == "transformers"]
    assert stuck and all(o.status == "error" for o in stuck), stuck
    assert "not judged: the run's --timeout was reached while the template rendered" in stuck[0].detail
