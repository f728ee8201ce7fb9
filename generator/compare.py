"""Where two token sequences part, told so a person can see it; and the reviewed-divergence ledger.

A drift report names the first divergent token index, both lengths, the decoded tokens around
it on both sides, and where both rendered strings exist, the first character where they part.
The ledger holds reviewed, committed per-engine expectations (`goldens/<model>/<stem>.<engine>.json`,
the golden format plus a `reason`): an engine that still gives exactly those ids passes; one that
moves, or that matches the reference again, is reported, so a fix upstream is noticed too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from generator import golden as golden_format
from generator.errors import GoldensError

WINDOW = 5
EXCERPT = 40


def first_divergence(a: Sequence, b: Sequence) -> int | None:
    """Index of the first position where a and b differ (a length difference counts); None if equal."""
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


@dataclass
class Divergence:
    index: int
    expected_len: int
    actual_len: int
    expected: list[tuple[int, int, str]]  # (position, id, piece) around the index
    actual: list[tuple[int, int, str]]
    char_index: int | None = None
    expected_text: str | None = None
    actual_text: str | None = None

    def summary(self) -> str:
        return f"drift at token {self.index} ({self.expected_len} vs {self.actual_len} tokens)"


def _window(ids: Sequence[int], pieces: Sequence[str], index: int) -> list[tuple[int, int, str]]:
    lo, hi = max(0, index - WINDOW), min(len(ids), index + WINDOW + 1)
    return [(i, ids[i], pieces[i]) for i in range(lo, hi)]


def diverge(expected_ids: Sequence[int], expected_pieces: Sequence[str], expected_prompt: str | None,
            actual_ids: Sequence[int], actual_pieces: Sequence[str] | None, actual_prompt: str | None,
            decode: Callable[[Sequence[int]], list[str]] | None = None) -> Divergence | None:
    """The divergence between a golden and an engine's answer, or None when the ids are equal."""
    index = first_divergence(expected_ids, actual_ids)
    if index is None:
        return None
    if actual_pieces is None or len(actual_pieces) != len(actual_ids):
        actual_pieces = decode(actual_ids) if decode else [""] * len(actual_ids)
    result = Divergence(
        index=index, expected_len=len(expected_ids), actual_len=len(actual_ids),
        expected=_window(expected_ids, expected_pieces, index),
        actual=_window(actual_ids, actual_pieces, index),
    )
    if expected_prompt is not None and actual_prompt is not None:
        at = first_divergence(expected_prompt, actual_prompt)
        if at is not None:
            result.char_index = at
            lo = max(0, at - EXCERPT // 2)
            result.expected_text = expected_prompt[lo:at + EXCERPT]
            result.actual_text = actual_prompt[lo:at + EXCERPT]
    return result


def format_divergence(div: Divergence, left: str = "reference", right: str = "engine") -> str:
    """A plain-text report: both windows side by side in rows, the divergent row marked."""
    width = max(len(left), len(right))
    lines = [div.summary()]
    for label, rows in ((left, div.expected), (right, div.actual)):
        cells = " ".join(
            ("»" if pos == div.index else "") + f"{pos}:{tid}:{piece!r}" for pos, tid, piece in rows
        )
        lines.append(f"  {label.ljust(width)} {cells or '(ends here)'}")
    if div.char_index is not None:
        lines.append(f"  strings part at character {div.char_index}:")
        lines.append(f"    {left.ljust(width)} {div.expected_text!r}")
        lines.append(f"    {right.ljust(width)} {div.actual_text!r}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the ledger

@dataclass
class LedgerEntry:
    """A reviewed divergence: what `engine` gives for a case instead of the golden, and why."""

    case: str
    engine: str
    reason: str
    ids: list[int]
    pieces: list[str]
    prompt: str | None
    path: Path | None = None
    refused: str | None = None  # the engine's refusal, when what was reviewed is that it refuses


def ledger_path(root: Path, case_id: str, engine: str) -> Path:
    return root / f"{case_id}.{engine}.json"


def read_ledger(root: Path, case_id: str, engine: str) -> LedgerEntry | None:
    path = ledger_path(root, case_id, engine)
    if not path.exists():
        return None
    item = golden_format.read(path)
    reason = item.extra.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise GoldensError(f"{path}: a ledger entry needs a non-empty `reason`")
    if item.extra.get("engine") != engine:
        raise GoldensError(f"{path}: `engine` must be {engine!r}")
    return LedgerEntry(case=item.case, engine=engine, reason=reason, ids=item.ids, pieces=item.pieces,
                       prompt=item.prompt, path=path, refused=item.error if item.outcome == "error" else None)


def write_ledger(root: Path, golden: golden_format.Golden, engine: str, reason: str,
                 ids: Sequence[int], pieces: Sequence[str], prompt: str | None,
                 refused: str | None = None) -> Path:
    """Record a reviewed divergence beside its golden (same format, plus engine and reason);
    `refused` records that the engine declines a request the reference renders."""
    index = None if refused else first_divergence(golden.ids, ids)
    entry = golden_format.Golden(
        case=golden.case, request=golden.request, outcome="error" if refused else "ok",
        ids=[] if refused else list(ids), pieces=[] if refused else list(pieces),
        prompt=None if refused else prompt, error=refused, provenance=golden.provenance,
        extra={"engine": engine, "reason": reason, "diverges_at": index},
    )
    path = ledger_path(root, golden.case, engine)
    golden_format.write_atomic(path, golden_format.dumps(entry))
    return path
