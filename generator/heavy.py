"""What takes minutes or the network declares itself here: a managed server start, a build, a
venv install, a download, a package-index look-up.

With GOLDENS_LIGHT=1 each of them is refused in one line instead of done, so a run that must stay
light (the one-minute test tier, `make test-fast`; a laptop on a train) cannot slip into a
ten-minute build or a 3 GB install. The fast tier runs with it set: a test that needs one of
these and is not marked `integration` fails there, naming what it tried.
"""

from __future__ import annotations

import os

from generator.errors import GoldensError

LIGHT = "GOLDENS_LIGHT"


def light() -> bool:
    return os.environ.get(LIGHT, "") not in ("", "0")


def require(what: str) -> None:
    """Refuse `what` (a server start, a build, an install, a download) in a light run."""
    if light():
        raise GoldensError(f"{what}: refused in a light run ({LIGHT}=1 allows no server start, build, "
                           "venv install, download or package-index look-up)")
