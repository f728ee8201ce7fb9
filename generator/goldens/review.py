"""What a person reviews after a render: the invariant findings the selected goldens carry (judged
against models.yaml's reviewed entries), the cases that render another case's ids, and the cases
disputed between a model's two references. Said, not refused; read from the goldens, so
`goldens regenerate` says it only when something rendered (or --write-invariants asks).
"""

from __future__ import annotations

from pathlib import Path

from generator.config.cases import EXPANDED_VIEW
from generator.config.models import ModelSpec
from generator.goldens import golden_file


def read_back(out: Path, goldens: dict[str, golden_file.Golden | None]) -> dict[str, golden_file.Golden]:
    """Every selected golden: a golden not rendered this run (None) read back from `out`."""
    return {case_id: item if item is not None else golden_file.read(golden_file.golden_path(out, case_id))
            for case_id, item in goldens.items()}


def invariant_review(goldens: dict[str, golden_file.Golden], models: list[ModelSpec]):
    """The invariant findings every selected golden carries, judged against models.yaml's
    reviewed entries."""
    from generator.analysis import invariants

    found = {case_id: invariants.findings_of(item.extra) for case_id, item in goldens.items()}
    return invariants.review(found, {model.name: model.invariants for model in models})


def same_ids(goldens: dict[str, golden_file.Golden]) -> list[str]:
    """One line per model naming the cases that render the ids another case of the same model
    and variant renders: what they add never reached the prompt (gemma3 ignores tool
    definitions; the reference decodes string arguments), so they check nothing their twin
    does not. Said, not refused: a team may keep a twin on purpose. Dialect cases are left
    out: they spell their shape for the engines' request layers, not for the template."""
    from generator.config import dialects

    first: dict[tuple, str] = {}
    twins: dict[str, list[str]] = {}
    for case_id, item in goldens.items():
        model, _, stem = case_id.partition("/")
        if golden_file.is_parse(item):
            continue  # output ids: two parse shapes with the same ids are never both kept
        if item.outcome != "ok" or item.extra.get("view") == EXPANDED_VIEW or dialects.split(stem) is not None:
            continue  # a dialect case renders its shape's ids by design: what it adds is for the engines
        key = (model, stem.partition("--")[2], tuple(item.ids))
        if key in first:
            twins.setdefault(model, []).append(f"{stem} = {first[key].partition('/')[2]}")
        else:
            first[key] = case_id
    return [f"{model}: {len(pairs)} case{'s render' if len(pairs) != 1 else ' renders'} another case's ids "
            f"(what they add never reaches the prompt): {', '.join(pairs)}" for model, pairs in twins.items()]


def disputed(goldens: dict[str, golden_file.Golden], models: list[ModelSpec]) -> list[str]:
    """One line per model naming the cases its two references (template and encoder) render
    differently and no `references.disputes` entry reviews: `goldens check` judges them against
    no engine and exits 2 until one does (docs/references.md)."""
    reviews = {model.name: model.disputes for model in models}
    open_: dict[str, list[str]] = {}
    for case_id, item in goldens.items():
        model, _, stem = case_id.partition("/")
        if "disputed" in item.extra and not any(r.covers(case_id) for r in reviews.get(model, ())):
            open_.setdefault(model, []).append(stem)
    return [f"{model}: {len(stems)} case{'s' if len(stems) != 1 else ''} disputed between its references, "
            f"not reviewed (models.{model}.references.disputes; docs/references.md): {', '.join(stems)}"
            for model, stems in open_.items()]

