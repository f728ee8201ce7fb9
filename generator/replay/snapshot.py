"""A syrupy extension whose snapshots are golden files, judged by the one judge.

`assert judge.answer(engine, request) == snapshot.use_extension(golden_extension(...))` hands
the engine's answer (its ids or its refusal) to `judge.verdict`, the same function `goldens
check` uses, against the committed golden and the engine's reviewed ledger entry; a mismatch
prints the verdict's drift report. Under `pytest --snapshot-update` the reference golden is
written in exactly the bytes `goldens regenerate` writes. Only the reference may write: an
engine's answer never becomes a golden by accident; a reviewed divergence is recorded with
`goldens ledger`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from syrupy.data import SnapshotCollections
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from generator import files
from generator.engines import Ids, Refused
from generator.goldens import golden_file
from generator.engines import pieces_of
from generator.reference import Rendered
from generator.replay import judge, ledger


def golden_extension(root: Path, case_id: str, request: dict, provenance: dict[str, Any],
                     engine: str | None = None,
                     annotate: Callable[[golden_file.Golden], None] | None = None,
                     ) -> type[SingleFileSnapshotExtension]:
    """An extension bound to one case (and, for a replay, one engine and its ledger entry).
    `annotate` adds the reference's analyses to a reference golden (regenerate.annotate), so
    --snapshot-update writes the same bytes as `goldens regenerate`."""
    location = golden_file.golden_path(root, case_id)
    entry = ledger.entry_path(root, case_id, engine) if engine else None
    if entry is not None and entry.exists():
        location = entry

    class GoldenSnapshot(SingleFileSnapshotExtension):
        _write_mode = WriteMode.TEXT
        file_extension = "json"

        @classmethod
        def get_location(cls, *, test_location, index) -> str:
            return str(location)

        def discover_snapshots(self, *, test_location, ignore_extensions=None) -> SnapshotCollections:
            # goldens/ is owned by `goldens regenerate`; syrupy must never judge files unused.
            return SnapshotCollections()

        def serialize(self, data, *, exclude=None, include=None, matcher=None) -> str:
            if isinstance(data, Rendered):
                ids, pieces, prompt, error = data.ids, data.pieces, data.prompt, data.error
            elif isinstance(data, Refused):  # an engine's refusal (judge.answer)
                ids, pieces, prompt, error = [], [], None, str(data)
            else:  # an engine's Ids
                ids, pieces, prompt, error = list(data), pieces_of(data), getattr(data, "prompt", None), None
            item = golden_file.Golden(
                case=case_id, request=request, outcome="error" if error else "ok", ids=list(ids),
                pieces=list(pieces), prompt=prompt, error=error, provenance=provenance,
            )
            if annotate is not None and isinstance(data, Rendered):
                if data.normalization is not None:  # as regenerate records it
                    item.extra["normalization"] = data.normalization
                annotate(item)
            return golden_file.dumps(item)

        def _verdict(self, serialized_data, snapshot_data) -> tuple[judge.Outcome, bool]:
            """judge.verdict on the answer; for the reference golden, also its exact error text
            and analyses (what regenerate would write), which no engine is held to."""
            new = golden_file.loads(serialized_data, "actual")
            got = Refused(new.error) if new.outcome == "error" else Ids(new.ids, new.prompt, new.pieces)
            if engine is not None:
                golden = golden_file.read(golden_file.golden_path(root, case_id))
                outcome = judge.verdict(golden, ledger.read(root, case_id, engine), engine, got)
                return outcome, outcome.ok
            golden = golden_file.loads(snapshot_data, str(location))
            outcome = judge.verdict(golden, None, "reference", got)
            exact = new.error == golden.error and (annotate is None or new.extra == golden.extra)
            return outcome, outcome.ok and exact

        def matches(self, *, serialized_data, snapshot_data) -> bool:
            return self._verdict(serialized_data, snapshot_data)[1]

        def diff_lines(self, serialized_data, snapshot_data):
            outcome, _ = self._verdict(serialized_data, snapshot_data)
            if not outcome.ok:
                yield from outcome.detail.splitlines()
                return
            new = golden_file.loads(serialized_data, "actual")
            old = golden_file.loads(snapshot_data, str(location))
            if new.error != old.error:
                yield f"golden: {old.outcome} {old.error or ''}".rstrip()
                yield f"actual: {new.outcome} {new.error or ''}".rstrip()
            for key in sorted(set(old.extra) | set(new.extra)):
                if annotate is not None and old.extra.get(key) != new.extra.get(key):
                    yield f"analysis {key!r} changed: golden {old.extra.get(key)!r}"
                    yield f"{' ' * len(f'analysis {key!r} changed: ')}actual {new.extra.get(key)!r}"

        @classmethod
        def write_snapshot_collection(cls, *, snapshot_collection, name_order=None) -> None:
            if engine is not None and engine != "reference":
                raise RuntimeError(
                    f"{case_id}: --snapshot-update writes reference goldens only; record a reviewed "
                    f"{engine} divergence with `goldens ledger`"
                )
            data = next(iter(snapshot_collection)).data
            files.atomic_write(Path(snapshot_collection.location), data)

    return GoldenSnapshot
