"""Progress on stderr: a bar over a run's cases on a terminal (silence in CI and pipes, so logs
stay diffable), and a line for long work (builds, venvs, downloads) everywhere, live on a
terminal and every few seconds in CI, so minutes of work are never silent."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def progress_bar(total: int | Callable[[], int], label: str) -> Iterator[Callable[[str], None]]:
    """Yields `advance(item)`; a rich bar on stderr only when stderr is an interactive terminal.
    `total` may be a function, called only when a bar is shown (counting may cost more than the
    work it would show: a no-change regenerate)."""
    if not sys.stderr.isatty() or os.environ.get("CI"):
        yield lambda item: None
        return
    # The bar is made on the first advance: a run that advances nothing (a regenerate with
    # nothing to render) counts nothing and imports no rich.
    state: dict[str, Any] = {}
    making = threading.Lock()  # a replay advances from its job threads

    def advance(item: str) -> None:
        with making:
            if "bar" not in state:
                make()
        if state["bar"] is not None:
            state["bar"].update(state["task"], advance=1, item=item)

    def make() -> None:
        count = total() if callable(total) else total
        if count == 0:
            state["bar"] = None
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("{task.fields[item]}"))
        state["bar"] = stack.enter_context(Progress(*columns, transient=True))
        state["task"] = state["bar"].add_task(label, total=count, item="")

    with contextlib.ExitStack() as stack:
        yield advance


# Seconds between plain progress lines when stderr is not a terminal (CI logs, pipes).
PLAIN_EVERY = float(os.environ.get("GOLDENS_PROGRESS_SECONDS") or 5)


def elapsed(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


class Work:
    """One long piece of work's state line (`update` sets what it is doing now)."""

    def __init__(self, label: str):
        self.label, self.now, self.started = label, "starting", time.monotonic()
        self._lock = threading.Lock()

    def update(self, now: str) -> None:
        with self._lock:
            self.now = now

    def line(self) -> str:
        with self._lock:
            return f"{self.label}: {self.now}, {elapsed(time.monotonic() - self.started)}"


@contextlib.contextmanager
def long_work(label: str, log: os.PathLike | str | None = None) -> Iterator[Work]:
    """Progress of work that takes minutes (a build, a venv install, a download), on stderr only
    (stdout stays what scripts read): the log path when it starts, then a live line on a
    terminal, or a plain line every PLAIN_EVERY seconds elsewhere, and how it ended."""
    work = Work(label)
    # GOLDENS_PROGRESS=lines: plain lines on a terminal too (work in a background process,
    # whose live line would fight the run's own)
    live = sys.stderr.isatty() and not os.environ.get("CI") and os.environ.get("GOLDENS_PROGRESS") != "lines"
    print(f"{label}: started" + (f" (log: {log})" if log else ""), file=sys.stderr, flush=True)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.5 if live else PLAIN_EVERY):
            if live:
                sys.stderr.write("\r\x1b[K" + work.line()[: shutil.get_terminal_size().columns - 1])
                sys.stderr.flush()
            else:
                print(work.line(), file=sys.stderr, flush=True)

    ticker = threading.Thread(target=tick, name=f"progress {label}", daemon=True)
    ticker.start()
    outcome = "failed"
    try:
        yield work
        outcome = "done"
    finally:
        stop.set()
        ticker.join()
        end = "\r\x1b[K" if live else ""
        print(f"{end}{label}: {outcome} in {elapsed(time.monotonic() - work.started)}"
              + (f" (log: {log})" if log and outcome == "failed" else ""), file=sys.stderr, flush=True)
