"""A team's choice to fail on known divergences of some classes (models.yaml `gate:`).

A known divergence passes: it was reviewed. A team may still want to stop on engine defects
(its own models meet goldens' engine-level causes, which ship as known) until they are fixed
upstream: `gate: [engine-defect]` turns each known verdict of that class into a failing
`known-gated` one, in `goldens check` and `pytest --goldens` alike (both call `gated`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from generator.replay.judging.outcome import Outcome


def gated(outcome: Outcome, classes: Iterable[str]) -> Outcome:
    classes = set(classes)
    if outcome.status != "known" or (outcome.klass or "unclassified") not in classes:
        return outcome
    return dataclasses.replace(outcome, status="drift", kind="known-gated",
                               detail=f"known {outcome.klass}, and models.yaml's gate fails on that class: "
                                      f"{outcome.detail}")


def apply(results, classes: Iterable[str]):
    """Every group's outcomes gated (check's results, in place); returns them."""
    classes = tuple(classes)
    if classes:
        for group in results.groups:
            group.outcomes = [gated(o, classes) for o in group.outcomes]
    return results
