"""Stopping a process group (servers/process.py `_stop_group`): nothing the leader started
outlives it, even when the leader ends first (a build's cmake outliving its driver: issue 22)."""

from __future__ import annotations

import subprocess
import sys

from faults import processes, wait_for

from generator.servers import process


def test_a_member_that_ignores_sigterm_is_killed_though_the_leader_ended_at_once(tmp_path):
    ready = tmp_path / "ready"
    marker = f"goldens-group-test-{tmp_path.name}"
    child = (f"import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
             f"pathlib.Path({str(ready)!r}).write_text('x'); time.sleep(60)  # {marker}")
    leader = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); "
                               "time.sleep(60)"], start_new_session=True)
    assert wait_for(ready.is_file, 30), "the member never started"

    process._stop_group(leader, timeout=0.5)

    assert leader.poll() is not None
    alive = [argv for _, state, _, argv in processes() if state != "Z" and marker in argv]
    assert alive == [], alive
    assert not process._group_alive(leader.pid)
