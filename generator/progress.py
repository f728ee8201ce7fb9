"""A progress bar on a terminal, silence in CI and pipes (so logs stay diffable)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def progress_bar(total: int, label: str) -> Iterator[Callable[[str], None]]:
    """Yields `advance(item)`; a rich bar on stderr only when stderr is an interactive terminal."""
    if not sys.stderr.isatty() or os.environ.get("CI") or total == 0:
        yield lambda item: None
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
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(label, total=total, item="")
        yield lambda item: bar.update(task, advance=1, item=item)
