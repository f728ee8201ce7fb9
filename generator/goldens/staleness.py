"""Stale goldens: rendered from a template or tokenizer that the sources no longer hold.

Every golden records the sha256 of the template and of the tokenizer it was rendered from (its
provenance). After a template edit or a tokenizer bump without `goldens regenerate`, replaying
those goldens would report the edit as every engine's drift, one DRIFT line per case, with no hint
of the fix. So `goldens check` and `pytest --goldens` compare provenance with the current sources
first, and a model whose goldens were rendered from other sources is one line that names them and
the fix (exit 2: nothing was judged), never a verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from generator.config.cases import all_cases
from generator.config.models import Config, ModelSpec
from generator.goldens import golden_file
from generator.sources.source import Source, resolve

# provenance key -> what the line calls it
KEYS = {"template_sha256": "template", "tokenizer_sha256": "tokenizer"}
SHOWN = 12  # hex digits of a sha256 in a line: enough to tell two apart, short enough to read


@dataclass(frozen=True)
class Stale:
    """A model's goldens whose provenance differs from its sources now."""

    model: str
    cases: tuple[str, ...]
    moved: tuple[tuple[str, str, str], ...]  # (what, recorded sha256 (most common), current sha256)

    def line(self) -> str:
        count = len(self.cases)
        goldens = f"{count} golden is" if count == 1 else f"{count} goldens are"
        why = "; ".join(f"rendered from {what} sha256 {old[:SHOWN]}, the source now has {new[:SHOWN]}"
                        for what, old, new in self.moved)
        return (f"{self.model}: {goldens} stale: {why}; run `goldens regenerate` "
                f"(then review `goldens diff`)")


def stale_goldens(model: str, source: Source, goldens: Iterable[golden_file.Golden]) -> Stale | None:
    """The model's goldens rendered from another template or tokenizer than `source` holds."""
    current = {"template_sha256": source.template_sha256, "tokenizer_sha256": source.tokenizer_sha256}
    cases: list[str] = []
    recorded: dict[str, Counter] = {key: Counter() for key in KEYS}
    for item in goldens:
        moved = {key: item.provenance.get(key) for key in KEYS if item.provenance.get(key) != current[key]}
        if moved:
            cases.append(item.case)
            for key, value in moved.items():
                recorded[key][str(value)] += 1
    if not cases:
        return None
    moved = tuple((KEYS[key], recorded[key].most_common(1)[0][0], current[key])
                  for key in KEYS if recorded[key])
    return Stale(model, tuple(cases), moved)


def committed(root: Path, model: ModelSpec) -> list[golden_file.Golden]:
    """The model's goldens present under `root` (a missing one is `check`'s own error)."""
    out = []
    for case in all_cases(model):
        path = golden_file.golden_path(root, case.id)
        if path.exists():
            out.append(golden_file.read(path))
    return out


def find(config: Config, root: Path, model_names: Iterable[str] = (),
         sources: dict[str, Source] | None = None) -> list[Stale]:
    """Every selected model whose committed goldens are stale, in config order."""
    out = []
    for model in config.select(tuple(model_names)):
        source = (sources or {}).get(model.name) or resolve(model, config)
        found = stale_goldens(model.name, source, committed(root, model))
        if found is not None:
            out.append(found)
    return out
