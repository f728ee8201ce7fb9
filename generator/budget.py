"""One render budget, of time and of size, for every engine that renders in-process.

A chat template is code from outside (a pull request can bring one): it may loop without end
or write a gigabyte. Every in-process render (the reference, `transformers`, `minijinja`) runs
inside `deadline()` and hands its prompt to `bounded()` before anything tokenizes it, so a
hostile template costs its run one line, never a hung gate or a killed process.

- Time: `GOLDENS_RENDER_DEADLINE` seconds per render (30 by default), never past the run's own
  deadline (`until`, set by `goldens check --timeout`). The run's deadline is a value handed down
  (the run's http.Transport carries it, an engine reads it from its EngineContext and passes it
  to every render), never a process global: two runs in one process each keep their own. A render runs on a process's main
  thread only, where SIGALRM interrupts it: Python delivers a signal's handler between two
  bytecodes and also inside the long C calls a template can reach (big-integer arithmetic checks
  for signals as it goes, `7 ** 300000000` included), and so do Ctrl-C and SIGTERM. An
  asynchronous exception on another thread reached none of those C calls (issue 44), so there is
  no such path: an engine asked from another thread sends the render to a worker process, whose
  main thread renders and whose parent kills it once the deadline is past (`HARD_GRACE`).
  MiniJinja renders in Rust, where no signal reaches: it gets `FUEL` instead, a deterministic
  bound on the instructions one render may run.
- The deadline is the machine's, not the template's: a render cut short by it is an EngineError
  (the case is not judged, exit 2), never a recorded outcome; so is running out of memory.
- Size: a prompt over MAX_PROMPT_CHARS is refused before tokenizing (tokenizing a 1 GB prompt
  takes over 20 GB), and one over MAX_PROMPT_TOKENS right after, before any piece is decoded.
  The bounds keep a golden inside what `check` reads back (64 MiB); they do not depend on the
  machine, so they are the template's recorded outcome.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time

from generator.errors import EngineError, GoldensError

RENDER_DEADLINE = 30.0  # seconds; real templates render in milliseconds
MAX_RENDER_DEADLINE = 86400.0
MAX_PROMPT_CHARS = 2 * 2**20  # a 128k-token context is about 0.5 M characters
MAX_PROMPT_TOKENS = 1_000_000  # with MAX_PROMPT_CHARS, a golden stays far inside the 64 MiB check reads
FUEL = 100_000_000  # MiniJinja instructions per render: about 2 s on one core here


class RenderDeadline(EngineError):
    """A template render that ran past its deadline: not judged (how long a render may take
    depends on the machine), never a golden's recorded outcome."""


class RunDeadline(EngineError):
    """A render cut short by the run's own deadline (`check --timeout`): the case was not
    judged, which is not the template's doing."""


class OutOfMemory(EngineError):
    """A render that ran out of memory: the machine's limit, not the template's outcome."""


class PromptTooLarge(Exception):
    """A template that rendered more text than any golden may hold: recorded as the outcome."""


HARD_GRACE = 5.0  # seconds a worker's render may run past its deadline before the parent kills it


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


def on_main_thread() -> bool:
    """Whether a render here can be bounded in this process (else it goes to a worker)."""
    return threading.current_thread() is threading.main_thread()


def limit(until: float | None = None) -> tuple[float, type[EngineError], str]:
    """The seconds the next render may take, and what to raise when they are spent: the render
    deadline, or what is left of the run's (`until`, a time.monotonic() value) when that is sooner."""
    seconds = render_seconds()
    if until is not None and until - time.monotonic() < seconds:
        return (max(0.001, until - time.monotonic()), RunDeadline,
                "not judged: the run's --timeout was reached while the template rendered")
    return (seconds, RenderDeadline, f"the template did not finish rendering within {seconds:g} s (the render "
                                     "deadline, GOLDENS_RENDER_DEADLINE: a limit of this machine's, so never "
                                     "recorded as the template's outcome)")


@contextlib.contextmanager
def deadline(until: float | None = None):
    """One render on this process's main thread, bounded by the render deadline (RenderDeadline)
    and the run's, `until` (RunDeadline): both say the case was not judged. A MemoryError inside is
    OutOfMemory. On any other thread this is refused: no bound reaches a C call there."""
    import signal

    if not on_main_thread():
        raise EngineError("internal: a template render was started off the main thread, where no deadline "
                          "reaches it; engines send such renders to a worker process (generator/budget.py)")
    seconds, kind, message = limit(until)

    armed = [True]

    def expired(signum, frame):
        if armed[0]:  # not once the block has ended (a signal already on its way)
            raise _Expired

    previous = signal.signal(signal.SIGALRM, expired)
    # raised again every REPEAT seconds until the block ends: code that catches what it should
    # not (Jinja's constant folding takes any Exception as "cannot fold" and computes it again)
    signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT)
    try:
        yield
    except _Expired:
        raise kind(message) from None
    except MemoryError:
        raise OutOfMemory("the render ran out of memory (a limit of this machine's, so never recorded as "
                          "the template's outcome)") from None
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


REPEAT = 0.5  # seconds between the deadline's signals once it has passed


class _Expired(BaseException):
    """The deadline's signal inside a render: a BaseException, so no `except Exception` in a
    library (Jinja's optimizer swallowed RenderDeadline and computed `7 ** 300000000` again,
    with no deadline left) takes it for the template's own failure; deadline() turns it into
    RenderDeadline or RunDeadline."""


def bounded(prompt: str) -> str:
    """The prompt, if a golden may hold it; else PromptTooLarge, before anything tokenizes it."""
    if len(prompt) > MAX_PROMPT_CHARS:
        raise PromptTooLarge(f"the template rendered {len(prompt):,} characters, more than the "
                             f"{MAX_PROMPT_CHARS:,} a prompt may have (a golden holds every token)")
    return prompt


def bounded_ids(ids):
    """The ids, if a golden may hold them; else PromptTooLarge, before any piece or analysis is
    made of them (4 MiB of prompt made a 108 MB golden in 5 min 42 s and 1.3 GB, then refused)."""
    if len(ids) > MAX_PROMPT_TOKENS:
        raise PromptTooLarge(f"the template rendered {len(ids):,} tokens, more than the "
                             f"{MAX_PROMPT_TOKENS:,} a prompt may have (a golden holds every token)")
    return ids
