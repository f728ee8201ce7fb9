"""Where reports go: checked before a run, held during it, written whole.

Every report file (`--junit`, `--report`, `--results`, a diff's `--report`) is written with
files.atomic_write, so a reader, or a second run writing the same path at the same moment, only
ever sees a whole report, and nothing but a regular file (or a new path) is ever written.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from generator import files
from generator.errors import GoldensError


def check_destination(*paths: Path | None) -> None:
    """Refuse, before a run, a report path that cannot be written, that is not a regular file
    or a new path (a device, a FIFO, a link to one: never replaced), or two reports on one path."""
    seen: dict[Path, Path] = {}
    for path in paths:
        if path is None:
            continue
        resolved = Path(os.path.realpath(path))
        if resolved in seen:
            raise GoldensError(f"{path}: two reports (--junit, --report, --results) name the same file")
        seen[resolved] = path
        try:
            info = resolved.stat()
        except (FileNotFoundError, NotADirectoryError):  # a new path (a bad parent is said below)
            info = None
        except OSError as error:
            raise GoldensError(f"{path}: cannot use as a report ({error.strerror})") from None
        if info is not None and stat.S_ISDIR(info.st_mode):
            raise GoldensError(f"{path}: is a directory, not a report file")
        if info is not None and not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            via = f" (a link to {resolved})" if resolved != Path(os.path.abspath(path)) else ""
            raise GoldensError(f"{path}: is a {kind}{via}; a report is written only to a regular "
                               "file or a new path")
        if info is None and os.path.islink(path) and not resolved.parent.is_dir():
            raise GoldensError(f"{path}: a link to {resolved}, whose folder does not exist; a report is "
                               "written through a link only to a file in an existing folder")
        parent = resolved.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise GoldensError(f"{path}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise GoldensError(f"{path}: {parent} is not writable")
        try:  # what access() cannot say (root in /proc, a read-only mount): a file made and removed
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".goldens-probe.")
        except OSError as error:
            raise GoldensError(f"{path}: cannot write in {parent} ({error.strerror or error})") from None
        os.close(fd)
        os.unlink(probe)


_KINDS = {stat.S_IFCHR: "character device", stat.S_IFBLK: "block device", stat.S_IFIFO: "FIFO",
          stat.S_IFSOCK: "socket"}


@contextlib.contextmanager
def claim(*paths: Path | None) -> Iterator[None]:
    """Hold each report path for the length of a run: a second run aiming at the same file is
    refused at once (exit 2) instead of racing the first one to it."""
    held = []
    try:
        for path in paths:
            if path is None:
                continue
            path = Path(os.path.realpath(path))  # two links to one report share one claim
            lock = path.parent / f".{path.name}.lock"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                handle = open(lock, "a")
            except OSError as error:  # /proc/r.md: its folder takes no lock file
                raise GoldensError(f"{path}: cannot write its lock file {lock} ({error.strerror})") from None
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                raise GoldensError(f"{path}: another goldens check is writing this report") from None
            held.append((lock, handle))
        yield
    finally:
        for lock, handle in held:
            lock.unlink(missing_ok=True)
            handle.close()


def write(path: Path, text: str) -> None:
    """Write through files.atomic_write: a whole report or none, a regular file only (a
    symlink is written through to its target), an existing report's mode kept."""
    files.atomic_write(Path(path), text, only_if_changed=False)
