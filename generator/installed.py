"""What this process has installed, read once: importlib.metadata parses a package's METADATA
with the email parser on every call (about 4 ms), and a no-change regenerate asks for the same
five releases about sixty times."""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def version(name: str) -> str:
    """The installed release of distribution `name` (PackageNotFoundError when it is not)."""
    return metadata.version(name)
