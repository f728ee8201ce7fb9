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


# ------------------------------------------------- `pytest --goldens --snapshot-update` is regenerate

class Update:
    """`pytest --goldens --snapshot-update` (or pytest-regressions' `--force-regen`) doing what
    `goldens regenerate` does, model by model as each model's last selected reference test ends:
    the changed goldens written in its bytes; for a model whose every case was selected, also the
    stale goldens and ledger entries of cases no longer in the matrix removed (each named) and its
    line of `regenerate.index` recorded, so the next `goldens regenerate` renders nothing. A model
    only partly selected (-k) has only its selected goldens written: the index then no longer
    matches their bytes, which costs a re-render, never a wrong skip."""

    def __init__(self, config, root: Path, record_index: bool = True):
        from generator.goldens.writing import Summary

        self.config = config
        self.root = Path(root)
        # False where the render ran in the venv at the pins: the versions here are not the ones
        # an index line names (the next regenerate then renders the model again, writing nothing)
        self.record_index = record_index
        self.summary = Summary()
        self.index_written = False
        self.pending: dict[str, set[str]] = {}  # model -> case ids of its reference tests still to run
        self.rendered: dict[str, dict[str, golden_file.Golden]] = {}

    def expect(self, case_ids) -> None:
        """The reference tests that will run (after -k/-m and --lf selection)."""
        for case_id in case_ids:
            self.pending.setdefault(case_id.split("/", 1)[0], set()).add(case_id)

    def rendered_case(self, item: golden_file.Golden, source) -> None:
        """A reference test's render; the model's goldens are written once its last one ran."""
        model = item.model
        self.rendered.setdefault(model, {})[item.case] = item
        waiting = self.pending.get(model, set())
        waiting.discard(item.case)
        if not waiting:
            self.flush(model, source)

    def flush(self, model_name: str, source) -> None:
        from generator.config.cases import all_cases
        from generator.goldens import index, render, render_pool, writing

        model = self.config.models[model_name]
        goldens = self.rendered.pop(model_name, {})
        cases = all_cases(model)
        whole = all(case.id in goldens for case in cases)
        if whole:
            render_pool.refuse_all_refused({model_name: list(goldens.values())})
        done = writing.write(self.root, dict(goldens), [model] if whole else [], all_models=False,
                             known_models=set(self.config.models))
        self.summary.written += done.written
        self.summary.unchanged += done.unchanged
        self.summary.removed += done.removed
        self.summary.removed_paths += done.removed_paths
        if whole and self.record_index:
            saved = index.load(self.root)
            inputs = index.model_inputs(model, source, self.config, cases,
                                        render.provenance(source, self.config),
                                        index.code_fingerprint(), index.library_versions())
            saved.record(model_name, inputs, {case.id: golden_file.dumps(goldens[case.id]) for case in cases})
            self.index_written |= index.save(self.root, saved)

    def lines(self) -> list[str]:
        """What a regenerate would print, and whether the index moved."""
        from generator.goldens import index

        where = self.root / index.NAME
        tail = f"; {where} updated" if self.index_written else ""
        return [*self.summary.lines()[:-1], f"goldens: {self.summary}{tail}"]
