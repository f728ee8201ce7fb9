"""Goldens and ledger entries of cases the matrix no longer has: said by `check` and
`pytest --goldens`, so a renamed shape or dropped model does not leave files that look judged.
`goldens regenerate` removes them (goldens/writing.py `owned` decides what is goldens' own)."""

from __future__ import annotations

from pathlib import Path

from generator.config.cases import model_cases
from generator.config.models import Config


def orphans(config: Config, root: Path, model_names) -> list[Path]:
    from generator.goldens.writing import owned

    out: list[Path] = []
    for model in config.select(tuple(model_names)):
        directory = Path(root) / model.name
        if not directory.is_dir():
            continue
        cases = {case.id for case in model_cases(model)}
        out += [path for path, _ in owned(directory, keep=lambda stem, m=model.name: f"{m}/{stem}" in cases)]
    return out


def note(config: Config, root: Path, model_names) -> list[str]:
    found = orphans(config, root, model_names)
    if not found:
        return []
    shown = ", ".join(str(p) for p in found[:5]) + (f", and {len(found) - 5} more" if len(found) > 5 else "")
    return [f"{len(found)} golden file{'s' if len(found) != 1 else ''} belong to no case of the matrix and were not "
            f"judged (`goldens regenerate` removes them): {shown}"]
