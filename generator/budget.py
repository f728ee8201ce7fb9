"""One render budget, of time and of size, for every engine that renders in-process.

A chat template is code from outside (a pull request can bring one): it may loop without end
or write a gigabyte. Every in-process render (the reference, `transformers`, `minijinja`) runs
inside `deadline()` and hands its prompt to `bounded()` before anything tokenizes it, so a
hostile template costs its case one recorded outcome, never a hung gate or a killed process.

- Time: `GOLDENS_RENDER_DEADLINE` seconds per render (30 by default), never past the run's own
  deadline (`run(until)`, set by `goldens check --timeout`). On a main thread SIGALRM interrupts
  the render; on any other thread (check's replay pool) the expiry is raised inside that thread
  as an asynchronous exception, which Python delivers between two bytecodes of Jinja's code.
  MiniJinja renders in Rust, where neither reaches: it gets `FUEL` instead, a deterministic
  bound on the instructions one render may run.
- Size: a prompt over MAX_PROMPT_CHARS is refused before tokenizing (tokenizing a 1 GB prompt
  takes over 20 GB). The bound keeps a golden inside what `check` reads back (64 MiB).
- `cancel_all()` interrupts every render in flight, and every render a case already under way
  on a pool thread (`case()`) begins afterwards: Ctrl-C ends a check at once, even where a case
  was waiting for its turn to render (the reference renders one case at a time, so the others
  wait for its lock, outside any deadline, and the pool's threads outlive the run's block).
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import time

from generator.errors import EngineError, GoldensError

RENDER_DEADLINE = 30.0  # seconds; real templates render in milliseconds
MAX_RENDER_DEADLINE = 86400.0
MAX_PROMPT_CHARS = 4 * 2**20  # a 128k-token context is about 0.5 M characters
FUEL = 100_000_000  # MiniJinja instructions per render: about 2 s on one core here


class RenderDeadline(Exception):
    """A template render that ran past its deadline: recorded as the case's outcome."""


class RunDeadline(EngineError):
    """A render cut short by the run's own deadline (`check --timeout`): the case was not
    judged, which is not the template's doing."""


class PromptTooLarge(Exception):
    """A template that rendered more text than any golden may hold: recorded as the outcome."""


def render_seconds() -> float:
    """The per-render deadline from GOLDENS_RENDER_DEADLINE; anything but a finite number of
    seconds above 0 and at most a day is a one-line error, never a render blamed on its template."""
    text = os.environ.get("GOLDENS_RENDER_DEADLINE", "").strip()
    if not text:
        return RENDER_DEADLINE
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= MAX_RENDER_DEADLINE):  # also false for nan
        raise GoldensError(f"GOLDENS_RENDER_DEADLINE={text[:40]!r}: expected seconds, a number above 0 "
                           f"and at most {MAX_RENDER_DEADLINE:g}")
    return seconds


_run_until: float | None = None  # time.monotonic() by which the current run must end


@contextlib.contextmanager
def run(until: float | None):
    """Renders inside this block end by `until` (a time.monotonic() value) too."""
    global _run_until
    previous, _run_until = _run_until, until
    try:
        yield
    finally:
        _run_until = previous


class _Render:
    """One render on a thread other than the main one, and whether its expiry was delivered."""

    def __init__(self, ident: int):
        self.ident = ident
        self.lock = threading.Lock()
        self.done = False
        self.delivered: type[BaseException] | None = None


_renders: dict[int, _Render] = {}
_renders_lock = threading.Lock()
_cases: set[int] = set()  # the threads inside case(): what cancel_all() reaches before they render
_cancelled: set[int] = set()  # of those, the ones cancel_all() reached: they render nothing more
INTERRUPTED = "not judged: the run was interrupted"


@contextlib.contextmanager
def case():
    """One case on a pool thread: a cancel_all() while it runs refuses every render it begins
    afterwards, as well as cutting the one in flight."""
    ident = threading.get_ident()
    with _renders_lock:
        _cases.add(ident)
    try:
        yield
    finally:
        with _renders_lock:
            _cases.discard(ident)
            _cancelled.discard(ident)


def _expired_class(base: type[Exception], message: str) -> type[Exception]:
    """An exception class that raises with `message`: CPython's asynchronous exceptions are
    delivered as a class, instantiated with no arguments."""
    return type(base.__name__, (base,), {"__init__": lambda self: base.__init__(self, message)})


def _deliver(render: _Render, exception: type[BaseException]) -> None:
    with render.lock:
        if render.done or render.delivered is not None:
            return
        render.delivered = exception
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(render.ident), ctypes.py_object(exception))


class _Withdrawn(BaseException):
    """Raised once on a render's own thread, in place of its withdrawn expiry."""


def _withdraw(render: _Render) -> None:
    """Clear an expiry delivered but not yet raised (the thread sat in C code meanwhile), on the
    render's own thread. Not by PyThreadState_SetAsyncExc(id, NULL): CPython (3.11) then still
    signals every thread's eval loop and clears that signal only when a thread raises an
    asynchronous exception, so every later bytecode of the process takes the slow path (a
    traced render afterwards ran minutes instead of seconds). The pending expiry is replaced by
    _Withdrawn, raised at the next bytecode and caught here."""
    assert render.ident == threading.get_ident(), "an expiry is withdrawn on its render's thread"
    try:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(render.ident), ctypes.py_object(_Withdrawn))
        for _ in range(1 << 30):  # raised at the first backward jump: the eval loop is signalled
            pass
    except _Withdrawn:
        return
    raise AssertionError("the withdrawn expiry was never raised")


@contextlib.contextmanager
def deadline():
    """One render, bounded by the render deadline (RenderDeadline, the template's outcome) and
    the run's (RunDeadline: not judged)."""
    import signal

    seconds = render_seconds()
    until = _run_until
    kind: type[Exception] = RenderDeadline
    message = (f"the template did not finish rendering within {seconds:g} s (the render deadline, "
               "GOLDENS_RENDER_DEADLINE)")
    if until is not None and until - time.monotonic() < seconds:
        seconds = max(0.001, until - time.monotonic())
        kind, message = RunDeadline, "not judged: the run's --timeout was reached while the template rendered"
    if threading.current_thread() is threading.main_thread():
        def expired(signum, frame):
            raise kind(message)

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    render = _Render(threading.get_ident())
    timer = threading.Timer(seconds, _deliver, (render, _expired_class(kind, message)))
    timer.daemon = True
    with _renders_lock:
        if render.ident in _cancelled:  # a case cancel_all() reached while it waited for its turn
            raise RunDeadline(INTERRUPTED)
        _renders[render.ident] = render
    timer.start()
    raising = False
    try:
        yield
    except BaseException:
        raising = True
        raise
    finally:
        timer.cancel()
        with render.lock:
            render.done = True
            delivered = render.delivered
        with _renders_lock:
            _renders.pop(render.ident, None)
        if delivered is not None:
            _withdraw(render)
            if not raising:
                raise delivered()


def cancel_all() -> None:
    """Interrupt every render in flight on other threads (Ctrl-C, SIGTERM): each ends with
    RunDeadline at its next bytecode, and every case under way renders nothing more, so the
    replay pool's threads end at once (the interpreter joins them before it exits)."""
    with _renders_lock:
        _cancelled.update(_cases)
        renders = list(_renders.values())
    for render in renders:
        _deliver(render, _expired_class(RunDeadline, INTERRUPTED))


def bounded(prompt: str) -> str:
    """The prompt, if a golden may hold it; else PromptTooLarge, before anything tokenizes it."""
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PromptTooLarge(f"the template rendered {len(prompt):,} characters, more than the "
                             f"{MAX_PROMPT_CHARS:,} a prompt may have (a golden holds every token)")
    return prompt
