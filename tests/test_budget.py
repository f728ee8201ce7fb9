"""The render budget (generator/budget.py): a hostile template costs its case one recorded
outcome, never a hung gate, a killed process or a template wrongly blamed.

The check tests run goldens in its own process on a one-model config whose template loops
without end on the `tools` shape, the reproduction of issue 34's first finding."""

from __future__ import annotations

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
from generator.goldens import golden_file
from faults import wait_for
from interrupt import catches, interruptible

ROOT = Path(__file__).resolve().parent.parent
LOOP = ("{%- if tools %}{%- for i in range(100000) %}{%- for j in range(100000) %}{%- endfor %}"
        "{%- endfor %}{%- endif %}{{ messages[0].content }}")


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


@pytest.fixture(scope="module")
def looping(tmp_path_factory) -> Path:
    """A config whose `tools` case loops, its goldens rendered under a 2 s render deadline."""
    folder = _config(tmp_path_factory.mktemp("loop"), LOOP)
    done = _goldens("regenerate", cwd=folder, env={"GOLDENS_RENDER_DEADLINE": "2"})
    assert done.returncode == 0, done.stderr
    tools = golden_file.read(folder / "goldens" / "m" / "tools.json")
    assert tools.outcome == "error" and "RenderDeadline" in tools.error, tools.error
    return folder


@pytest.fixture(scope="module")
def looping_twice(tmp_path_factory) -> Path:
    """A config whose `plain` and `tools` cases both loop (the reference renders them one at a
    time: the second waits for the first, outside any deadline)."""
    folder = _config(tmp_path_factory.mktemp("loop2"), LOOP.replace("if tools", "if tools or messages|length > 1"))
    done = _goldens("regenerate", cwd=folder, env={"GOLDENS_RENDER_DEADLINE": "2"})
    assert done.returncode == 0, done.stderr
    for case in ("plain", "tools"):
        golden = golden_file.read(folder / "goldens" / "m" / f"{case}.json")
        assert golden.outcome == "error" and "RenderDeadline" in golden.error, (case, golden.error)
    return folder


@pytest.mark.parametrize("engine", ["transformers", "minijinja"])
@pytest.mark.slow
def test_a_looping_case_ends_within_the_runs_timeout(looping, engine):
    started = time.monotonic()
    done = _goldens("check", "--engine", engine, "--timeout", "12", cwd=looping, timeout=60)
    elapsed = time.monotonic() - started
    assert "Traceback" not in done.stderr, done.stderr
    # the start-up (imports, the tokenizer) comes on top; without the budget it never ends
    assert elapsed < 12 + 45, f"check --engine {engine} took {elapsed:.1f} s for --timeout 12"
    if engine == "transformers":  # Jinja's Python code: cut at the run's deadline, not judged
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "not judged: the run's --timeout was reached while the template rendered" in done.stderr
    else:  # MiniJinja's Rust code: out of fuel long before, a refusal like the reference's
        assert done.returncode in (0, 1), (done.stdout, done.stderr)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
def test_ctrl_c_ends_a_check_stuck_in_a_render_at_once(looping_twice):
    # neither the run's timeout nor the render's deadline can end it within the test: only Ctrl-C.
    # Two cases loop: the second, waiting for its turn when Ctrl-C comes, must not render either
    # SIGINT at its default in the check even when this run was started with it ignored (a
    # background job): an ignored Ctrl-C stays ignored, and this test then waited forever
    process = interruptible([sys.executable, "-m", "generator.cli", "check", "--engine", "transformers",
                             "--timeout", "600"], cwd=looping_twice, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "GOLDENS_RENDER_DEADLINE": "600",
                                 "PYTHONFAULTHANDLER": "1"})
    try:
        # the other cases render in milliseconds after the imports: a process that has burnt
        # 8 s of CPU is inside a looping render, and the other looping case waits for its turn
        assert wait_for(lambda: _cpu_seconds(process.pid) > 8, timeout=120), "check never got busy"
        assert catches(process.pid, signal.SIGINT), "the check does not take SIGINT: Ctrl-C would be ignored"
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        try:
            _, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # say where every thread sat
            process.send_signal(signal.SIGABRT)
            _, stderr = process.communicate(timeout=30)
            raise AssertionError(f"Ctrl-C did not end the check; its threads:\n{stderr}") from None
        # at once: seconds even on a loaded machine, where the render alone would run 600 s
        assert time.monotonic() - started < 60, stderr
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr


def test_a_check_the_tests_interrupt_takes_sigint_when_the_run_ignores_it():
    """Issue #34: the Ctrl-C test above hung (no exit in 120 s) in full runs started as
    background jobs: a shell starts those with SIGINT ignored, the check inherited that and, as
    goldens must, kept ignoring it. A child started by `interruptible` takes SIGINT whatever this
    run inherited; synchronised on its first line, printed once Python has its handler in place."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # how `pytest &` in a script starts
    try:
        child = interruptible([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert child.stdout.readline() == "up\n"
        assert catches(child.pid, signal.SIGINT), "the child inherited an ignored SIGINT"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=30) == -signal.SIGINT  # KeyboardInterrupt: Python ends by the signal
    finally:
        child.kill()
        child.wait()


def test_a_render_on_another_thread_is_cut_at_its_deadline(monkeypatch):
    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "0.3")
    seen: list[BaseException] = []

    def spin():
        try:
            with budget.deadline():
                while True:
                    pass
        except BaseException as error:  # noqa: BLE001 (what the thread saw is the test)
            seen.append(error)

    worker = threading.Thread(target=spin)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert len(seen) == 1 and isinstance(seen[0], budget.RenderDeadline), seen
    assert "0.3 s" in str(seen[0])


def test_ctrl_c_also_ends_a_render_that_was_waiting_for_its_turn(monkeypatch):
    """The reference renders one case at a time (reference.frozen_date's lock, taken outside the
    deadline), so at Ctrl-C the replay pool's other threads may be waiting for their turn, in no
    deadline yet. cancel_all() cut only the render in flight; the next, looping too, then ran its
    whole deadline while the interpreter's exit joined the pool's threads. Deterministic: the
    waiting case can render only after the first has ended, which is after cancel_all()."""
    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "30")
    turn = threading.Lock()
    rendering = threading.Event()
    seen: dict[str, BaseException] = {}

    def spin(name: str) -> None:
        try:
            with budget.case(), turn, budget.deadline():
                rendering.set()
                while True:
                    pass
        except BaseException as error:  # noqa: BLE001 (what each thread saw is the test)
            seen[name] = error

    first = threading.Thread(target=spin, args=("first",), daemon=True)
    first.start()
    assert rendering.wait(10), "the first render never began"
    waiting = threading.Thread(target=spin, args=("waiting",), daemon=True)
    waiting.start()
    assert wait_for(lambda: len(budget._cases) == 2, timeout=10), "the waiting case never began"
    budget.cancel_all()
    first.join(10)
    waiting.join(10)
    assert not first.is_alive() and not waiting.is_alive(), "a render outlived Ctrl-C"
    assert sorted(seen) == ["first", "waiting"], seen
    for error in seen.values():
        assert isinstance(error, budget.RunDeadline) and str(error) == budget.INTERRUPTED, repr(error)
    after: list[BaseException] = []  # a case begun after the cancel renders as before

    def quick() -> None:
        try:
            with budget.case(), budget.deadline():
                pass
        except BaseException as error:  # noqa: BLE001
            after.append(error)

    worker = threading.Thread(target=quick)
    worker.start()
    worker.join(10)
    assert after == [] and not worker.is_alive(), after


def test_the_runs_deadline_is_not_blamed_on_the_template(monkeypatch):
    seen: list[BaseException] = []

    def spin():
        try:
            with budget.deadline():
                while True:
                    pass
        except BaseException as error:  # noqa: BLE001
            seen.append(error)

    with budget.run(time.monotonic() + 0.3):
        worker = threading.Thread(target=spin)
        worker.start()
        worker.join(timeout=10)
    assert len(seen) == 1 and isinstance(seen[0], budget.RunDeadline), seen
    assert not isinstance(seen[0], budget.RenderDeadline)


def test_a_render_that_ends_in_time_leaves_nothing_behind(monkeypatch):
    monkeypatch.setenv("GOLDENS_RENDER_DEADLINE", "0.2")
    errors: list[BaseException] = []

    def quick():
        try:
            with budget.deadline():
                sum(range(1000))
            past = time.monotonic() + 0.5  # running Python past the deadline: a stray expiry would land here
            while time.monotonic() < past:
                pass
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    worker = threading.Thread(target=quick)
    worker.start()
    worker.join(timeout=10)
    assert errors == []


@pytest.mark.parametrize("value", ["nan", "inf", "1e308", "-1", "0", "soon"])
def test_a_bad_render_deadline_is_one_line_not_a_template_error(value):
    result = CliRunner(env={"GOLDENS_RENDER_DEADLINE": value}).invoke(
        main, ["models", "--config", str(ROOT / "models.yaml")])  # in this process: no interpreter start per value
    assert one_line_error(result).startswith("goldens: error: GOLDENS_RENDER_DEADLINE="), result.stderr


@pytest.mark.slow
def test_a_huge_prompt_is_recorded_before_anything_tokenizes_it(tmp_path):
    folder = _config(tmp_path, '{% if tools %}{{ "{:>100000000}".format(1) }}{% endif %}'
                               '{{ messages[0].content }}')
    done = _goldens("regenerate", cwd=folder, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    golden = golden_file.read(folder / "goldens" / "m" / "tools.json")
    assert golden.outcome == "error" and "PromptTooLarge" in golden.error, golden.error
    assert (folder / "goldens" / "m" / "tools.json").stat().st_size < 1 << 20



AFTER_AN_EXPIRY = """
import sys, threading
from generator import budget
def spin():
    try:
        with budget.deadline():
            while True:
                pass
    except budget.RenderDeadline:
        print("expired")
worker = threading.Thread(target=spin)
worker.start()
worker.join()
def call():
    return 1
sys.settrace(lambda frame, event, arg: None)
print(sum(call() for _ in range(10000)))
"""


def test_an_expired_render_leaves_a_traced_render_able_to_run():
    """A withdrawn expiry must not leave CPython's eval loop signalled: withdrawn with
    PyThreadState_SetAsyncExc(id, NULL), the signal stayed set, and the next traced function
    call (goldens coverage's renders) never returned. In a process of its own, so a regression
    is a failure, not a hung suite."""
    done = subprocess.run([sys.executable, "-c", AFTER_AN_EXPIRY], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "GOLDENS_RENDER_DEADLINE": "0.2", "PYTHONPATH": str(ROOT)}, timeout=60)
    assert (done.returncode, done.stdout) == (0, "expired\n10000\n"), done.stderr[-2000:]
