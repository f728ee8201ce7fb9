"""Where two token sequences part, told so a person can see it.

A drift report names the first divergent token index, both lengths, the decoded tokens around
it on both sides, and where both rendered strings exist, the first character where they part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from generator.engines import first_divergence, pieces_of

WINDOW = 5
EXCERPT = 40


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
    actual_pieces = pieces_of(actual_ids, decode, given=actual_pieces)
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
