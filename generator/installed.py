"""What this process has installed, read once: importlib.metadata parses a package's METADATA
with the email parser on every call (about 4 ms), and a no-change regenerate asks for the same
five releases about sixty times."""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache
def version(name: str) -> str:
    """The installed release of distribution `name` (PackageNotFoundError when it is not).
    Read from the Version header line of its METADATA; the email parser only when that line
    is not found where it should be."""
    dist = metadata.distribution(name)
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    for line in text.split("\n\n", 1)[0].splitlines():  # the headers end at the first blank line
        if line.startswith("Version:"):
            found = line[len("Version:"):].strip()
            if found:
                return found
    return dist.version
