"""The one way this project touches the filesystem: the cache, atomic writes, and locks.

Every file goldens writes goes through `atomic_write` (bytes in hand), `atomic_file` (a file a
copy or another program fills) or `atomic_dir` (a directory built in place), so a reader never
sees half a file and a crash never leaves one; every build or install that two processes could
race on takes `file_lock`. Each exists once so its guarantees hold everywhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from generator.errors import GoldensError


def cache_dir() -> Path:
    """Where downloads, builds and tiny models live: $GOLDENS_CACHE or ~/.cache/goldens."""
    root = os.environ.get("GOLDENS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "goldens"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: str | bytes, *, only_if_changed: bool = True) -> bool:
    """Replace `path` with `data` in one rename; True when the file changed.

    A symlink is written through (its target is updated, the link kept); an existing file keeps
    its mode and a new one gets the umask's; anything that is not a regular file (a device, a
    FIFO, a directory) is refused rather than replaced. The temp file is removed on any error.
    """
    blob = data.encode("utf-8") if isinstance(data, str) else data
    target = Path(os.path.realpath(path))
    try:
        info = target.stat()
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise GoldensError(f"{path}: cannot write ({error.strerror})") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise GoldensError(f"{path}: cannot write (is a directory)")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise GoldensError(f"{path}: not a regular file; refusing to replace it")
    if info is not None and only_if_changed:
        with contextlib.suppress(OSError):
            if target.read_bytes() == blob:
                return False
    mode = stat.S_IMODE(info.st_mode) if info is not None else 0o666 & ~_umask()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise GoldensError(f"{path}: cannot write ({error.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(error, OSError):
            raise GoldensError(f"{path}: cannot write ({error.strerror})") from None
        raise
    return True


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock held for the block, so two processes never build the same
    artifact at once. The lock file is never unlinked: unlinking it would let a third process
    lock a new inode while the second still holds the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def atomic_file(path: Path, *, mode: int | None = None) -> Iterator[Path]:
    """A temp path beside `path` for a copy or another program to fill (`atomic_write` is for
    bytes in hand); renamed to `path` in one step when the block ends, removed when it raises.
    `mode` is set before the rename; without it the file keeps what its writer gave it (a
    copied binary stays executable)."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
    except OSError as error:
        raise GoldensError(f"{path}: cannot write ({error.strerror})") from None
    tmp = Path(name)
    try:
        yield tmp
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """A fresh directory beside `path` for the block to fill, put at `path` in one rename when
    the block ends and removed when it raises, so a reader never sees half a build.

    An existing directory at `path` (an older build of the same cache key) is replaced whole;
    when a concurrent builder of the same inputs lands first, its directory is kept and this one
    dropped: both hold the same bytes.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
        os.chmod(tmp, 0o777 & ~_umask())
    except OSError as error:
        raise GoldensError(f"{path}: cannot write ({error.strerror})") from None
    try:
        yield tmp
        _put_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _put_dir(new: Path, target: Path) -> None:
    """Rename `new` to `target`, moving a directory already there aside first."""
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise GoldensError(f"{target}: not a directory; refusing to replace it")
    with contextlib.suppress(OSError):
        os.rename(new, target)  # fails only when target is a directory with something in it
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
    try:
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, old / "previous")
        try:
            os.rename(new, target)
        except OSError:
            if not target.is_dir():  # else a concurrent builder's copy landed in between
                raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """A cached artifact: `target` as is when it exists, else `build(path)` writes it to a
    temporary path under a lock and atomic_file puts it in place, so concurrent callers build
    it once and nobody reads half a file."""
    if target.exists():
        return target
    with file_lock(target.parent / f".{target.name}.lock"):
        if target.exists():
            return target
        with atomic_file(target, mode=0o666 & ~_umask()) as tmp:
            build(tmp)
    return target
