"""The one way this project touches the filesystem: the cache, atomic writes, and locks.

Every file goldens writes goes through `atomic_write` (bytes in hand), `atomic_file` (a file a
copy or another program fills) or `atomic_dir` (a directory built in place), so a reader never
sees half a file and a crash never leaves one; every build or install that two processes could
race on takes `file_lock`. Each exists once so its guarantees hold everywhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from generator import canonical, redaction
from generator.errors import GoldensError


def cache_dir() -> Path:
    """Where downloads, builds and tiny models live: $GOLDENS_CACHE or ~/.cache/goldens."""
    root = os.environ.get("GOLDENS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "goldens"
    )
    path = Path(root)
    if os.path.isdir(root):  # asked hundreds of times a run: one stat, not a mkdir that fails
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise GoldensError(f"the cache folder {path} (GOLDENS_CACHE) cannot be made: "
                           f"{error.strerror or error}") from None
    if not path.is_dir():
        raise GoldensError(f"the cache folder {path} (GOLDENS_CACHE) is not a folder")
    return path


ALLOW_PATHS = "GOLDENS_ALLOW_PATHS"  # folders outside models.yaml's that its files may name


def config_path(base: Path, value: str | os.PathLike) -> Path:
    """A file or folder models.yaml names (a template, a tokenizer, a GGUF, each file a request
    glob matches), resolved through every symlink: under models.yaml's own folder `base`, or
    under a folder the user allows outside it in GOLDENS_ALLOW_PATHS, else one error line. The
    one rule for all of them: a config is often a pull request's, and a template or a request
    file at /proc/self/environ (or `../outside/*.json`, or a link to either) would put the CI's
    environment in the goldens and the PR comment."""
    path = Path(os.path.realpath(os.path.join(base, os.path.expanduser(str(value)))))
    if not os.path.exists(path):
        raise GoldensError(f"{value}: no such file or directory")
    roots = [Path(os.path.realpath(base))] + [Path(os.path.realpath(p))
                                              for p in os.environ.get(ALLOW_PATHS, "").split(os.pathsep) if p]
    if not any(path == root or path.is_relative_to(root) for root in roots):
        raise GoldensError(f"{value}: outside the folder of models.yaml ({roots[0]}); name a folder "
                           f"elsewhere in {ALLOW_PATHS} to read from it")
    return path


MAX_READ = 64 * 1024 * 1024  # bytes: no config, template, request, golden or index is near this


def read_bytes(path: Path, what: str | None = None, limit: int = MAX_READ) -> bytes:
    """The one way goldens reads a file of the user's (a config, template, request, golden,
    index): a regular file (a FIFO would block forever, /dev/zero never end) of at most `limit`
    bytes, else one error line naming `what` (default: the path). Opened without blocking, so
    a FIFO is refused, not waited on."""
    what = what or str(path)
    with _open_regular(path, what) as (handle, info):
        if info.st_size > limit:
            raise GoldensError(f"{what}: {info.st_size} bytes, more than the {limit} a file here may hold")
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise GoldensError(f"{what}: cannot read ({error.strerror})") from None
    if len(data) > limit:
        raise GoldensError(f"{what}: more than the {limit} bytes a file here may hold")
    return data


@contextlib.contextmanager
def _open_regular(path: Path, what: str) -> Iterator[tuple[Any, os.stat_result]]:
    """(the open binary handle, its stat) of a regular file, opened without blocking; anything
    else (a directory, a symlink loop, a FIFO, a device) is one error line naming `what`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise GoldensError(f"{what}: is a directory, not a file") from None
    except OSError as error:
        if error.errno == 40:  # ELOOP
            raise GoldensError(f"{what}: a symlink loop") from None
        raise GoldensError(f"{what}: cannot read ({error.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise GoldensError(f"{what}: is a directory, not a file")
        kind = {stat.S_IFCHR: "character device", stat.S_IFBLK: "block device", stat.S_IFIFO: "FIFO",
                stat.S_IFSOCK: "socket"}.get(stat.S_IFMT(info.st_mode), "special file")
        raise GoldensError(f"{what}: is a {kind}, not a regular file")
    with os.fdopen(fd, "rb") as handle:
        yield handle, info


def read_lines(path: Path, what: str | None = None, limit: int = MAX_READ) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes without the newline) for each line of a regular file of any size, read
    as it goes (a team's log may be gigabytes); a line over `limit` bytes is (number, None) and
    skipped, never held whole. The same refusals as read_bytes for anything but a regular file."""
    what = what or str(path)
    with _open_regular(path, what) as (handle, _):
        number = 0
        while True:
            try:
                line = handle.readline(limit + 1)
            except OSError as error:
                raise GoldensError(f"{what}: cannot read ({error.strerror})") from None
            if not line:
                return
            number += 1
            if len(line) > limit and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # the rest of the long line, in pieces
                    line = handle.readline(limit + 1)
                yield number, None
                continue
            yield number, line.rstrip(b"\n")


def read_text(path: Path, what: str | None = None, limit: int = MAX_READ) -> str:
    """`read_bytes` as UTF-8 text; bytes that are not UTF-8 are one error line too."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GoldensError(f"{what or path}: not UTF-8 (byte 0x{data[error.start]:02x} at offset "
                           f"{error.start})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def inside(path: Path, root: Path) -> Path:
    """`path` resolved, when it lies in the folder `root` goldens owns and no file or folder
    between `root` and it is a symlink; else one error line (a link committed into goldens/
    must never make a write land elsewhere). `root` itself may be a link: the user chose it."""
    path, root = Path(path), Path(root)
    try:
        relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(root))
    except ValueError:
        raise GoldensError(f"{path}: outside {root}; nothing written") from None
    step = Path(root)
    for part in relative.parts:
        step = step / part
        if step.is_symlink():
            raise GoldensError(f"{step}: is a symlink (to {os.readlink(step)}); goldens writes in {root} "
                               "only to files and folders of its own, nothing written")
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if real != real_root and not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise GoldensError(f"{path}: resolves outside {root} (to {real}); nothing written")
    return Path(real)


def atomic_write(path: Path, data: str | bytes, *, only_if_changed: bool = True,
                 within: Path | None = None) -> bool:
    """Replace `path` with `data` in one rename; True when the file changed.

    With `within` (the folder goldens owns: goldens/), the path must be inside it through no
    symlink (`inside`). Otherwise (a report path the user named) a symlink is written through
    (its target is updated, the link kept). An existing file keeps its mode and a new one gets
    the umask's; anything that is not a regular file (a device, a FIFO, a directory) is refused
    rather than replaced. Every configured secret is taken out first (generator/redaction.py).
    The temp file is removed on any error.
    """
    kind = {".json": "json", ".xml": "xml"}.get(Path(path).suffix.lower(), "")  # kept valid
    blob = redaction.redact_bytes(data.encode("utf-8") if isinstance(data, str) else data, kind)
    target = inside(path, within) if within is not None else Path(os.path.realpath(path))
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
    lock a new inode while the second still holds the old one. A folder it cannot be made in
    (a cache on a read-only filesystem) is one error line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")
    except OSError as error:
        hint = " (GOLDENS_CACHE names another folder)" if Path(path).is_relative_to(cache_dir()) else ""
        raise GoldensError(f"{path.parent}: cannot write here ({error.strerror or error}){hint}") from None
    with handle:
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


def build_dir_once(target: Path, build: Callable[[Path], str]) -> Path:
    """A cached directory: `target` as is when its `.complete` marker exists and every file it
    was built with is still there, unchanged (`.manifest.json`), else `build(path)` fills a fresh
    directory under a lock and returns the marker's text (what it was built from), and
    atomic_dir puts it in place whole, so concurrent callers build it once and nobody reads half
    a directory. A damaged directory (a file removed, cut short or edited since, its manifest
    missing or not the one it was built with) is built again, with a line saying so: a damaged
    cache must never turn into goldens, and `build` verifies what it fetches (a pack against its
    pinned sha256)."""
    marker = target / ".complete"
    if marker.exists() and _intact(target) is None:
        return target
    with file_lock(target.parent / f".{target.name}.lock"):
        if marker.exists():
            damage = _intact(target, again=True)
            if damage is None:
                return target
            import sys

            print(f"goldens: {target} is damaged ({damage}); making it again", file=sys.stderr)
        with atomic_dir(target) as tmp:
            stamp = build(tmp)
            manifest = _write_manifest(tmp)
            (tmp / ".complete").write_text(f"{stamp}\n{MANIFEST} sha256 {manifest}\n")
    _verified.add(str(target))
    return target


MANIFEST = ".manifest.json"
_verified: set[str] = set()  # directories checked in this process


def _files_of(root: Path) -> Iterator[Path]:
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.parent != root or name not in (".complete", MANIFEST):
                yield path


def _write_manifest(root: Path) -> str:
    """Each file's size, mtime and sha256, as built: what `_intact` checks on use. Returns the
    manifest's own sha256, which the `.complete` marker records."""
    entries = {}
    for path in _files_of(root):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            entries[str(path.relative_to(root))] = [info.st_size, info.st_mtime_ns, sha256_of(path)]
    text = canonical.dumps(entries)
    (root / MANIFEST).write_text(text)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _intact(root: Path, again: bool = False) -> str | None:
    """None when the manifest is the one the directory was built with (its sha256 in the
    `.complete` marker) and every file of it is there with its size, and its content where its
    mtime moved (so the check is a stat per file); else what is wrong. Checked once a process.
    A missing manifest is damage, never trust: a directory without one is built again (issue 44:
    a pack whose tokenizer.json and manifest were removed made 79 garbage goldens)."""
    if str(root) in _verified and not again:
        return None
    try:
        text = (root / MANIFEST).read_text()
        marker = (root / ".complete").read_text()
    except FileNotFoundError as error:
        return f"{Path(error.filename).name} is missing"
    except (OSError, UnicodeDecodeError):
        return f"{MANIFEST} unreadable"
    recorded = re.search(rf"^{re.escape(MANIFEST)} sha256 ([0-9a-f]{{64}})$", marker, re.M)
    if recorded is not None and recorded[1] != hashlib.sha256(text.encode("utf-8")).hexdigest():
        return f"{MANIFEST} is not the one it was built with"
    try:
        entries = json.loads(text)
    except ValueError:
        return f"{MANIFEST} unreadable"
    if not isinstance(entries, dict) or not all(
            isinstance(e, list) and len(e) == 3 for e in entries.values()):
        return f"{MANIFEST} unreadable"
    base = os.fspath(root)
    for name, entry in entries.items():  # a stat per file, as strings: thousands in llama.cpp's tree
        try:
            info = os.lstat(os.path.join(base, name))
        except (OSError, TypeError, ValueError):
            return f"{name} is missing"
        size, mtime, digest = entry
        if not stat.S_ISREG(info.st_mode) or info.st_size != size:
            return f"{name} changed size"
        if info.st_mtime_ns != mtime and sha256_of(root / name) != digest:
            return f"{name} changed"
    _verified.add(str(root))
    return None


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


def remembered(path: Path, what: str, compute: Callable[[Path], Any], valid: Callable[[Any], bool]) -> Any:
    """compute(path), remembered in the cache under the file's identity (real path, inode, size,
    mtime) and `what`, so a file that did not change is read once per change, not once per run
    (a GGUF's header, a 10 MB tokenizer.json's digest). A memo that does not read back as `valid`
    JSON is computed again; compute's own error says what is wrong with an unreadable file."""
    return remembered_all([path], what, lambda paths: compute(paths[0]), valid)


def remembered_all(paths: Sequence[Path], what: str, compute: Callable[[Sequence[Path]], Any],
                   valid: Callable[[Any], bool]) -> Any:
    """compute(paths), remembered under the identities of all of them (see remembered): one
    changed file computes it again."""
    parts, folders = [], {}
    try:
        for path in paths:  # a stat each (hundreds of goldens): the folder resolved once, not per file
            text = os.path.abspath(path)
            info = os.lstat(text)
            if stat.S_ISLNK(info.st_mode):
                real = os.path.realpath(text)
                info = os.stat(real)
            else:
                folder, name = os.path.split(text)
                if folder not in folders:
                    folders[folder] = os.path.realpath(folder)
                real = os.path.join(folders[folder], name)
            parts.append(f"{real}\0{info.st_ino}\0{info.st_size}\0{info.st_mtime_ns}")
    except (OSError, ValueError):
        return compute(paths)
    identity = "\0".join([*parts, what])
    memo = cache_dir() / "file-memos" / hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
        if valid(known):
            return known
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    found = compute(paths)
    with contextlib.suppress(GoldensError):  # a memo only saves time: a read-only cache still works
        atomic_write(memo, canonical.dumps(found) + "\n")
    return found


def sha256_hex(path: Path) -> str:
    """The sha256 of a file's bytes, remembered under its identity (see remembered)."""
    return remembered(path, "sha256", sha256_of, is_sha256)


def sha256_of(path: Path) -> str:
    """The sha256 of a regular file's bytes, streamed (a vocabulary or an archive is not read
    into memory whole); a FIFO is refused, not waited on (read_bytes' one open)."""
    with _open_regular(path, str(path)) as (handle, _):
        try:
            return hashlib.file_digest(handle, "sha256").hexdigest()
        except OSError as error:
            raise GoldensError(f"{path}: cannot read ({error.strerror})") from None


def is_sha256(value: Any) -> bool:
    # strip in C, not a loop per character: a no-change run checks one digest per golden
    return isinstance(value, str) and len(value) == 64 and not value.strip("0123456789abcdef")
