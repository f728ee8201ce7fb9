"""Writing a run's goldens: only what changed, each atomically, after every path is checked; then
removing this matrix's own stale files (`owned`: only what provably is a golden or a ledger
entry; anything else in --out is the user's). The Summary says what was written and removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from generator import files
from generator.config import engine_registry
from generator.config.models import ModelSpec
from generator.errors import GoldensError
from generator.goldens import golden_file, index


@dataclass
class Summary:
    written: int = 0
    unchanged: int = 0
    removed: int = 0  # goldens and ledger entries, each listed in removed_paths
    removed_paths: list[tuple[Path, str]] = field(default_factory=list)  # (path, "golden" | "ledger entry")
    left_alone: list[Path] = field(default_factory=list)  # directories of models not in the config
    invariants: list[str] = field(default_factory=list)  # the goldens' invariant findings, for a person
    proposed: dict = field(default_factory=dict)  # model -> the `invariants:` entries that would review the rest

    def __str__(self) -> str:
        return f"{self.written} written, {self.unchanged} unchanged, {self.removed} removed"

    def lines(self) -> list[str]:
        """What was removed, file by file, what was left alone, and the summary line last."""
        out = [f"removed {path} ({kind})" for path, kind in self.removed_paths]
        out += [f"left {path}/ alone: {path.name} is not in the config (--prune removes its goldens)"
                for path in self.left_alone]
        return [*out, *self.invariants, str(self)]


def write(out: Path, goldens: dict[str, golden_file.Golden | None], models: list[ModelSpec],
          all_models: bool, known_models: set[str], prune: bool = False) -> Summary:
    """Write what changed (None: a golden not rendered, as the index recorded it), then remove
    this matrix's own stale files: within the selected models' directories, goldens and ledger
    entries of cases no longer in the matrix. A file is removed only when it proves to be one
    (`owned`); anything else in --out is the user's. On a full run, directories of models
    absent from the config are left alone and reported, unless `prune` (another config pointed
    at the same --out must not empty it)."""
    from generator.config.models import RESERVED

    summary = Summary()
    # a symlink anywhere on the way is refused before anything is written: each golden to write,
    # and the folders of those not rendered (nothing is written to them; a stat per folder, not
    # per golden, keeps a no-change run's cost off the matrix's size)
    to_write = [golden_file.golden_path(out, case_id) for case_id, item in goldens.items() if item is not None]
    kept = {Path(out) / folder  # golden_path's folders, a Path per folder, not per golden
            for folder in {case_id.rpartition("/")[0] for case_id, item in goldens.items() if item is None}}
    for path in [*to_write, *sorted(kept)]:
        files.inside(path, out)
    files.inside(Path(out) / index.NAME, out)
    texts = {case_id: golden_file.dumps(item) for case_id, item in goldens.items() if item is not None}
    for case_id, text in texts.items():  # what check could not read back is refused before any write
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > files.MAX_READ:
            raise GoldensError(f"{case_id}: its golden would be {size:,} bytes, more than the {files.MAX_READ:,} "
                               "`goldens check` reads; nothing was written (make the request smaller)")
    for case_id, item in goldens.items():
        if item is None:  # not rendered: its inputs and its bytes are as the index recorded
            summary.unchanged += 1
            continue
        changed = files.atomic_write(golden_file.golden_path(out, case_id), texts[case_id], within=out)
        if changed:
            summary.written += 1
        else:
            summary.unchanged += 1
    dirs = [out / m.name for m in models]
    if all_models and out.is_dir():
        absent = [d for d in sorted(out.iterdir())  # goldens' own folders (causes/) hold no model's goldens
                  if d.name not in RESERVED and d.name not in known_models and d.is_dir() and not d.is_symlink()
                  and owned(d)]
        if prune:
            dirs += absent
        else:
            summary.left_alone = absent
    dirs = [path for directory in dirs for path in (directory / golden_file.PARSE_FOLDER, directory)]
    for directory in dirs:
        if not directory.is_dir() or directory.is_symlink():
            continue
        prefix = case_prefix(directory)
        for path, kind in owned(directory, keep=lambda stem: f"{prefix}{stem}" in goldens):
            try:
                path.unlink()
            except OSError as error:
                raise GoldensError(f"{path}: cannot remove this stale {kind} ({error.strerror})") from None
            summary.removed += 1
            summary.removed_paths.append((path, kind))
        with contextlib.suppress(OSError):  # emptied by us: tidy; anything else: leave it
            if not any(directory.iterdir()):
                directory.rmdir()
    return summary


def case_prefix(directory: Path) -> str:
    """How the case ids of a folder's goldens begin: `qwen3/`, or `qwen3/parse/` for its parse folder."""
    if directory.name == golden_file.PARSE_FOLDER:
        return f"{directory.parent.name}/{directory.name}/"
    return f"{directory.name}/"


def owned(directory: Path, keep: Callable[[str], bool] | None = None) -> list[tuple[Path, str]]:
    """The files of `directory` that are provably goldens' own: regular files named
    `<stem>.json` (a golden) or `<stem>.<engine>.json` (a ledger entry of a known engine) that
    read as valid goldens of this directory's model and case (golden_file.read checks the case
    against the path) and, for a ledger entry, name that engine. A user's notes.json is not.
    `keep(stem)` true: a file of a case still in the matrix, left out before it is read (a
    no-change run reads no golden)."""
    out = []
    with os.scandir(directory) as entries:  # what glob("*.json") lists: no hidden file
        names = sorted(e.name for e in entries if e.name.endswith(".json") and not e.name.startswith("."))
    for name in names:
        parts = name[: -len(".json")].split(".")
        if keep is not None and keep(parts[0]):
            continue  # a case of the matrix's golden or entry: no stat, no Path (a folder listed once)
        path = directory / name
        if path.is_symlink() or not path.is_file():
            continue
        if len(parts) == 1:
            kind = "golden"
        elif (len(parts) == 2 or parts[2:] == ["stand-in"]) and engine_registry.NAME.match(parts[1]):
            kind = "ledger entry"  # `<stem>.<engine>.stand-in.json` too: a stand-in endpoint's
        else:
            continue
        try:
            item = golden_file.read(path)
        except GoldensError:
            continue
        if kind == "ledger entry" and item.extra.get("engine") != parts[1]:
            continue
        out.append((path, kind))
    return out

