"""Golden files as syrupy snapshots, in syrupy's own shape (its single-file extension).

`assert reference_golden(case, ...) == snapshot(name=case.id, extension_class=GoldenSnapshot)`
serializes the reference's Golden exactly as `goldens regenerate` writes it (golden_file.dumps)
and matches it with the committed file by equality, so any moved token, refusal text, analysis
or provenance fails the test with syrupy's line diff (one token per line). Under
`pytest --snapshot-update` the file is rewritten in those same bytes, through the one atomic
write. The snapshot's name is the case id; the file is goldens/<model>/<stem>.json beside the
tests/ folder. Engines are not snapshots: their tests ask the judge for a verdict, and a reviewed
divergence is recorded with `goldens ledger`, never by a snapshot update.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from generator import files
from generator.goldens import golden_file


class GoldenSnapshot(SingleFileSnapshotExtension):
    _write_mode = WriteMode.TEXT
    file_extension = "json"

    def serialize(self, data: Any, **_: Any) -> str:
        if not isinstance(data, golden_file.Golden):
            raise TypeError(f"a golden snapshot serializes a Golden, not {type(data).__name__}")
        return golden_file.dumps(data)

    @classmethod
    def get_location(cls, *, test_location, index) -> str:
        root = Path(test_location.filepath).parent.parent / "goldens"
        return str(golden_file.golden_path(root, str(index)))

    @classmethod
    def write_snapshot_collection(cls, *, snapshot_collection, name_order=None) -> None:
        files.atomic_write(Path(snapshot_collection.location), next(iter(snapshot_collection)).data)
