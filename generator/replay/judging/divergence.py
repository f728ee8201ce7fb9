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


def divergence_point(a: Sequence, b: Sequence) -> int | None:
    """Where a drift report points: the first difference, moved back to the start of a run of
    one repeated token that both sides share there. An image's soft tokens are such a run, and
    when their count changes the first difference falls at the shorter run's end; the image,
    from its first token, is what moved."""
    index = first_divergence(a, b)
    if index is None or index == 0:
        return index
    token = a[index - 1]
    extends = (index < len(a) and a[index] == token) or (index < len(b) and b[index] == token)
    if b[index - 1] != token or not extends:
        return index  # not inside a run that one side makes longer
    start = index - 1
    while start > 0 and a[start - 1] == token:
        start -= 1
    return start


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
    run: tuple[int, int] | None = None  # lengths of the repeated-token run starting at index


    def summary(self) -> str:
        return f"drift at token {self.index} ({self.expected_len} vs {self.actual_len} tokens)"


def _window(ids: Sequence[int], pieces: Sequence[str], index: int) -> list[tuple[int, int, str]]:
    lo, hi = max(0, index - WINDOW), min(len(ids), index + WINDOW + 1)
    return [(i, ids[i], pieces[i]) for i in range(lo, hi)]


def diverge(expected_ids: Sequence[int], expected_pieces: Sequence[str], expected_prompt: str | None,
            actual_ids: Sequence[int], actual_pieces: Sequence[str] | None, actual_prompt: str | None,
            decode: Callable[[Sequence[int]], list[str]] | None = None) -> Divergence | None:
    """The divergence between a golden and an engine's answer, or None when the ids are equal."""
    index = divergence_point(expected_ids, actual_ids)
    if index is None:
        return None
    actual_pieces = pieces_of(actual_ids, decode, given=actual_pieces)
    result = Divergence(
        index=index, expected_len=len(expected_ids), actual_len=len(actual_ids),
        expected=_window(expected_ids, expected_pieces, index),
        actual=_window(actual_ids, actual_pieces, index),
    )
    if index != first_divergence(expected_ids, actual_ids):
        result.run = (_run_length(expected_ids, index), _run_length(actual_ids, index))
    if expected_prompt is not None and actual_prompt is not None:
        at = first_divergence(expected_prompt, actual_prompt)
        if at is not None:
            result.char_index = at
            lo = max(0, at - EXCERPT // 2)
            result.expected_text = expected_prompt[lo:at + EXCERPT]
            result.actual_text = actual_prompt[lo:at + EXCERPT]
    return result


def _run_length(ids: Sequence[int], start: int) -> int:
    end = start
    while end < len(ids) and ids[end] == ids[start]:
        end += 1
    return end - start


def format_divergence(div: Divergence, left: str = "reference", right: str = "engine") -> str:
    """A plain-text report: both windows side by side in rows, the divergent row marked."""
    width = max(len(left), len(right))
    lines = [div.summary()]
    if div.run is not None:
        piece = next(p for pos, _, p in div.expected if pos == div.index)
        lines.append(f"  {piece!r} repeated {div.run[0]} times in {left}, {div.run[1]} in {right}")
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
