"""What this machine lets a run use: its cores (the affinity a CI runner or container gives this
process, not the host's count), read one way by every stage that spreads work."""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on (its affinity where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
