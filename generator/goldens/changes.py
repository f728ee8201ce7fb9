"""What changed in the goldens against a git revision: each golden (or ledger entry) whose bytes
differ, its old side from `git show REV:path` and its new side from the working tree (so staged,
unstaged and untracked goldens all count). Read here; compared in alignment.py, told in diff.py.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from generator import files
from generator.errors import GoldensError, printable
from generator.goldens import golden_file


@dataclass
class Change:
    name: str  # "qwen3/tools", or "qwen3/tools.vllm" for a ledger entry
    path: str  # relative to the repository top
    old: golden_file.Golden | None
    new: golden_file.Golden | None
    file: Path | None = None  # the working-tree file, when the golden still exists

    @property
    def ledger(self) -> bool:
        return "." in self.name.rsplit("/", 1)[-1]

    @property
    def model(self) -> str:
        return self.name.split("/", 1)[0]


def _git(top: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(["git", "-C", str(top), *args], capture_output=True)
    except FileNotFoundError:
        raise GoldensError("git is not installed (goldens diff reads the old goldens from git)") from None
    if check and result.returncode != 0:
        message = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GoldensError(f"git {args[0]} failed: {message[-1] if message else result.returncode}")
    return result


def changed(root: Path, rev: str = "HEAD") -> list[Change]:
    """Every golden (and ledger entry) under root that differs between `rev` and the working tree."""
    root = Path(root)
    if rev.startswith("-") or not rev.strip():
        raise GoldensError(f"{rev!r} is not a git revision")
    if not root.is_dir():
        raise GoldensError(f"{root}: no such directory of goldens")
    found = _git(root, "rev-parse", "--show-toplevel", check=False)
    if found.returncode != 0:
        raise GoldensError(f"{root}: not inside a git repository (goldens diff compares against git)")
    top = Path(found.stdout.decode().strip()).resolve()
    if _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False).returncode != 0:
        raise GoldensError(f"unknown git revision {rev!r}")
    where = root.resolve().relative_to(top).as_posix() or "."

    listed = _git(top, "-c", "core.quotepath=off", "diff", "--name-status", "-z", "--no-renames",
                  "--no-ext-diff", rev, "--", where).stdout.decode("utf-8").split("\0")
    paths = {path: status for status, path in zip(listed[::2], listed[1::2]) if path}
    untracked = _git(top, "ls-files", "-z", "--others", "--exclude-standard", "--", where).stdout
    for path in untracked.decode("utf-8").split("\0"):
        if path:
            paths.setdefault(path, "A")

    changes = []
    for path in sorted(paths):
        name = Path(path).name
        if not name.endswith(".json") or name.startswith("."):
            continue
        old = new = None
        if not paths[path].startswith("A"):
            shown = _git(top, "show", f"{rev}:{path}", check=False)
            if shown.returncode == 0:
                old_text = shown.stdout.decode("utf-8", "replace")
                old = golden_file.loads(old_text, f"{rev}:{path}") if _is_golden(old_text) else None
        file = top / path
        if file.exists() and _is_golden(files.read_bytes(file)):
            new = golden_file.read(file)
        if old is None and new is None:  # gone from both, or a file of the user's (regenerate leaves it too)
            continue
        if old is not None and new is not None and golden_file.dumps(old) == golden_file.dumps(new):
            continue  # only reformatted
        rel = Path(path).relative_to(where) if where != "." else Path(path)
        # a name is printed on stdout: a newline in a folder's name must not start a line of its
        # own (under Actions, `::warning ...` there would be a workflow command)
        changes.append(Change(name=printable(rel.with_suffix("").as_posix()), path=path, old=old, new=new,
                              file=file if new is not None else None))
    return changes


def _is_golden(data: str | bytes) -> bool:
    """Whether a JSON file under goldens/ is in the golden format (a JSON object with a `case`),
    rather than a file of the user's that `regenerate` leaves alone too (a broken golden still
    says why when it is read)."""
    try:
        value = json.loads(data)
    except ValueError:
        return True  # not JSON at all: reading it as a golden says so
    return isinstance(value, dict) and "case" in value
