"""Every lock file goldens writes, one convention: a choice made once (it takes renders or seconds
to make) and kept in the repository, so the next run reads it instead of making it again.

- Name: `<stem of the file it pins>.<what it locks>.lock`, beside that file: models.yaml's
  dialect cases are `models.dialects.lock`, its templates' capabilities `models.capabilities.lock`,
  and the rows derived from requests/schema.json `requests/schema.derived.lock`. A lock that pins
  a folder (an imported corpus's kept request files) is named after the folder and lies inside
  it, `requests/bfcl/bfcl.corpus.lock`: the import writes only under the folder it is given, and
  the folder carries its provenance wherever it is copied (no request reader takes a `.lock`).
- Shape: one JSON document whose first keys say what it is: `schema` (what it locks and the
  shape's version), `written_by` (the command that rewrites it) and `about`; the locked content is
  under `data`. Bytes are deterministic, so an unchanged choice rewrites nothing.
- Older names and shapes (`dialects.lock`, `requests/derived.lock`, a corpus folder's
  `corpus.lock`, a capabilities lock without `schema`) are still read, so a team's repository
  holding them keeps working; the next write uses the new name and shape and removes the old file.

This module reads and writes them; what a lock's `data` must hold is checked by its owner
(config/dialects.py, config/polyfill.py, config/derived.py, sources/corpora.py). docs/locks.md
describes them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import files
from generator.errors import GoldensError
from generator.json_reader import load_json

FORMAT = 1


@dataclass(frozen=True)
class Lock:
    """One kind of lock: what it locks (`what`, also its name's middle), the command that
    rewrites it, and how its older files are read."""

    what: str  # "dialects": models.dialects.lock, schema "goldens.dialects.lock/1"
    written_by: str
    about: str
    legacy: tuple[str, ...] = ()  # older names beside the pinned file, read when the new one is absent
    old_shape: Callable[[Any], Any] = field(default=lambda document: document, repr=False)  # a document without `schema` -> data
    lines: str | None = None  # a list in `data` written one item a line (a regenerated lock diffs item by item)
    folder: bool = False  # it pins a folder: the lock lies inside it, named after it

    @property
    def schema(self) -> str:
        return f"goldens.{self.what}.lock/{FORMAT}"

    def _anchor(self, pinned: Path) -> Path:
        """The path whose siblings the lock and its older names are: the pinned file, or for a
        folder a name inside it (requests/bfcl -> requests/bfcl/bfcl)."""
        pinned = Path(pinned)
        return pinned / pinned.name if self.folder else pinned

    def path(self, pinned: Path) -> Path:
        """Where the lock of `pinned` (models.yaml, requests/schema.json, requests/bfcl/) is written."""
        anchor = self._anchor(pinned)
        stem = anchor.name if self.folder else anchor.stem  # a folder's whole name: `data.v2` keeps its dot
        return anchor.with_name(f"{stem}.{self.what}.lock")

    def old(self, pinned: Path) -> list[Path]:
        """Where its older names would be."""
        return [self._anchor(pinned).with_name(name) for name in self.legacy]

    def found(self, pinned: Path) -> Path | None:
        """The file a read takes: the lock under its name, else an older name, else None."""
        for path in (self.path(pinned), *self.old(pinned)):
            if path.is_file():
                return path
        return None


def _models(document: Any) -> Any:
    """dialects.lock before locks.py: {"about", "models": {model: {dialects, cases}}}."""
    return document.get("models") if isinstance(document, dict) else None


def _rows(document: Any) -> Any:
    """requests/derived.lock before locks.py: {"about", "catalogue_sha256", "seed", "rows"}."""
    return {k: v for k, v in document.items() if k != "about"} if isinstance(document, dict) else None


DIALECTS = Lock(
    "dialects", "goldens regenerate (chosen again only with: goldens regenerate --rechoose-dialects)",
    "dialect cases kept per model: the selection chosen from and the cases kept (generator/config/dialects.py, "
    "docs/dialects.md)", legacy=("dialects.lock",), old_shape=_models)
CAPABILITIES = Lock(
    "capabilities", "goldens regenerate",
    "per model: what its template takes (generator/analysis/capabilities.py, docs/capabilities.md) and the "
    "parse cases written for it (generator/goldens/parse_goldens.py), each with the template's sha256 it was probed on")
DERIVED = Lock(
    "derived", "python -m generator.config.derived",
    "derived dialects (generator/config/derived.py): rows of a pairwise covering array over the fields of "
    "requests/schema.json, and one row per invalid level, part type and schema keyword",
    legacy=("derived.lock",), old_shape=_rows, lines="rows")


def _provenance(document: Any) -> Any:
    """A corpus folder's corpus.lock before locks.py: the provenance itself, `kept` among its keys."""
    return document if isinstance(document, dict) and "kept" in document else None


CORPUS = Lock(
    "corpus", "goldens requests import corpus:NAME --out DIR",
    "an imported registry corpus (generator/coverage/traffic.py, generator/sources/corpora.py): its pin, "
    "licence and conversion, the bodies read and the names of the request files kept in this folder",
    legacy=("corpus.lock",), old_shape=_provenance, folder=True)
ALL = (DIALECTS, CAPABILITIES, DERIVED, CORPUS)


def read(lock: Lock, pinned: Path) -> Any:
    """The lock's data for `pinned` (None when there is no lock): under its name, else an older
    one, in this shape or the older one. A lock of another kind or shape is one line."""
    path = lock.found(pinned)
    if path is None:
        return None
    again = f"delete it and run `{lock.written_by}`"
    try:
        document = load_json(files.read_text(path), path.name)
    except GoldensError as error:  # not JSON, not UTF-8, too deep: said once, with the way out
        raise GoldensError(f"{error}; {again}") from None
    if not isinstance(document, dict) or not isinstance(document.get("schema"), str):
        data = lock.old_shape(document)  # written before this convention
        if data is None:
            raise GoldensError(f"{path.name}: not a {lock.what} lock (no `schema` key); {again}")
        return data
    if document["schema"] != lock.schema or "data" not in document:
        raise GoldensError(f"{path.name}: expected a lock with schema {lock.schema!r} and its `data`, "
                           f"found schema {str(document['schema'])[:60]!r}; {again}")
    return document["data"]


def dumps(lock: Lock, data: Any) -> str:
    """The lock's bytes: the header keys, then `data` as given (the caller orders it)."""
    head = {"schema": lock.schema, "written_by": lock.written_by, "about": lock.about}
    lines = [f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}," for key, value in head.items()]
    if lock.lines is None:
        body = json.dumps(data, indent=2, ensure_ascii=False).replace("\n", "\n  ")
    else:  # one item a line, the rest of `data` on the line before them
        rest = json.dumps({k: v for k, v in data.items() if k != lock.lines}, ensure_ascii=False)[:-1]
        items = ",\n".join(json.dumps(item, ensure_ascii=False) for item in data[lock.lines])
        body = f"{rest}{', ' if len(rest) > 1 else ''}{json.dumps(lock.lines)}: [\n{items}\n]}}"
    return "{\n" + "\n".join(lines) + f'\n  "data": {body}\n}}\n'


def write(lock: Lock, pinned: Path, data: Any) -> bool:
    """Write the lock of `pinned` under its name (the same bytes: nothing written) and remove an
    older-named one beside it; True when anything changed on disk."""
    path = lock.path(pinned)
    changed = files.atomic_write(path, dumps(lock, data))
    for old in lock.old(pinned):
        if old != path and old.is_file():
            old.unlink()
            changed = True
    return changed
