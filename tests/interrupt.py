"""Children the tests interrupt, started as a terminal starts them.

A POSIX shell starts a background job without job control (`make test-fast > log &` in a script,
a tool that backgrounds a long run) with SIGINT ignored, and an ignored signal stays ignored
across fork and exec: that pytest process and every child it starts ignore Ctrl-C. goldens
keeps an ignored SIGINT ignored, as a nohup'd or backgrounded program must
(generator/servers/process.py `handle_signals`), so a test that sent its child SIGINT waited for
an end that could not come: issue #34, twice, in backgrounded full runs. `interruptible` starts
the child with SIGINT at its default whatever the test run inherited, and `catches` says whether
a process has its own handler in place: the moment a signal sent to it means something.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path


def _as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # in the child, before exec: Python then installs its own


def interruptible(args: Sequence[str], **popen) -> subprocess.Popen:
    """subprocess.Popen(args, **popen), with SIGINT at its default in the child."""
    return subprocess.Popen(args, preexec_fn=_as_in_a_terminal, **popen)


def catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler of its own for `signum` now (not ignored, not the
    default), from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    raise AssertionError(f"/proc/{pid}/status has no SigCgt line")
