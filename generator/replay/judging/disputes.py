"""Disputed cases: where a model's two references (its template and its encoder) disagree.

A golden of a model with an encoder reference (models.yaml `references: {encoder: NAME}`) holds
the template's outcome as its ids and, where the encoder's differs, a `disputed` record with the
encoder's whole outcome and the first token where they part (generator/encoder.py `dispute`).
Until a reviewed entry (`references.disputes: [{cases, right, reason}]`) says which reference is
right, such a case is judged against no engine: each engine's verdict is `disputed`, and a run
with one exits 2 (could not judge), never 1, because no engine drifted from anything agreed. A
reviewed entry makes the case an ordinary one, judged against the reference it names; an entry
that covers no disputed case any more is stale and fails the gate, as a stale invariant does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from generator.config.models import ReviewedDispute
from generator.errors import GoldensError
from generator.goldens import golden_file

KIND = "disputed"
STALE = "dispute-stale"
COLUMN = "references"  # where a stale review shows, beside the invariants column


def record(item: golden_file.Golden) -> dict[str, Any] | None:
    """The golden's dispute record, or None (no dispute, or a parse golden)."""
    if golden_file.is_parse(item):
        return None
    found = item.extra.get(KIND)
    if found is None:
        return None
    encoder = found.get("encoder") if isinstance(found, dict) else None
    if (not isinstance(encoder, dict) or encoder.get("outcome") not in ("ok", "error")
            or not isinstance(encoder.get("tokens"), list)
            or not all(isinstance(t, list) and len(t) == 2 and type(t[0]) is int and isinstance(t[1], str)
                       for t in encoder["tokens"])):
        raise GoldensError(f"{item.case}: its `disputed` record is malformed (regenerate it: goldens regenerate)")
    return found


def review_of(case_id: str, reviews: Sequence[ReviewedDispute]) -> ReviewedDispute | None:
    return next((review for review in reviews if review.covers(case_id)), None)


def judged_against(item: golden_file.Golden, reviews: Sequence[ReviewedDispute]) -> golden_file.Golden | None:
    """The golden engines are judged against: the golden itself where the references agree or a
    review says the template is right, the encoder's outcome in its place where a review says
    the encoder is, None where the case is disputed and no review covers it."""
    found = record(item)
    if found is None:
        return item
    review = review_of(item.case, reviews)
    if review is None:
        return None
    if review.right == "template":
        return item
    encoder = found["encoder"]
    return dataclasses.replace(
        item, outcome=encoder["outcome"], error=encoder.get("error"), prompt=encoder.get("prompt"),
        ids=[t[0] for t in encoder["tokens"]], pieces=[t[1] for t in encoder["tokens"]],
        extra={k: v for k, v in item.extra.items() if k != "normalization"},
    )


def describe(item: golden_file.Golden) -> str:
    """What the two references did, in one line: the first token that differs, or who refused."""
    found = record(item) or {}
    encoder = found.get("encoder") or {}
    where = found.get("first_divergence")
    if where is not None:
        what = (f"at token {where['index']} the template writes {_token(where.get('template'))}, "
                f"the encoder {_token(where.get('encoder'))}")
    elif item.outcome == "error":
        what = f"the template refuses ({item.error}), the encoder renders {len(encoder.get('tokens') or [])} tokens"
    else:
        what = f"the template renders {len(item.ids)} tokens, the encoder refuses ({encoder.get('error')})"
    model = item.case.partition("/")[0]
    return (f"the references disagree: {what}; judged against no engine until models.{model}.references.disputes "
            "says which is right (docs/references.md)")


def _token(token: Any) -> str:
    return "nothing (its prompt ends)" if token is None else f"{token[1]!r} ({token[0]})"


def stale(model: str, case_ids: Sequence[str], goldens: Sequence[golden_file.Golden],
          reviews: Sequence[ReviewedDispute]) -> list[tuple[str, ReviewedDispute]]:
    """(first case, review) for each reviewed entry that covers no disputed golden of these."""
    disputed = [item.case for item in goldens if record(item) is not None]
    return [(case_ids[0], review) for review in reviews
            if not any(review.covers(case) for case in disputed)]
