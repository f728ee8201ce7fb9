"""Two sides of a golden aligned: token ids with difflib's SequenceMatcher (no junk heuristic, so
a long run of one token aligns as it is), the rendered text by its common prefix and suffix, each
change as rows of position, id and piece with a few tokens of context.
"""

from __future__ import annotations

import difflib

from generator.goldens import golden_file

TEXT_CONTEXT = 24  # characters shown either side of the rendered text's changed span
SPAN_LIMIT = 240  # characters of a changed span shown before it is cut
ROW_LIMIT = 400  # token rows per file before the rest is summarised
SUMMARY_PARTS = 3  # token changes spelled out in a summary line before they are counted instead


def opcodes(old_ids: list[int], new_ids: list[int]) -> list[tuple[str, int, int, int, int]]:
    return difflib.SequenceMatcher(None, old_ids, new_ids, autojunk=False).get_opcodes()


def _span(a: int, b: int) -> str:
    return f"{a}" if b - a == 1 else f"{a}-{b - 1}"


def count_of(count: int, word: str = "token", plural: str | None = None) -> str:
    return f"{count} {word if count == 1 else plural or word + 's'}"


def describe_tokens(ops: list[tuple[str, int, int, int, int]]) -> str:
    """'9 tokens removed at 106-114', '3 tokens changed at 40-42', '2 tokens added at 7-8', ..."""
    parts = []
    removed = added = 0
    for tag, i1, i2, j1, j2 in ops:
        if tag == "delete":
            parts.append(f"{count_of(i2 - i1)} removed at {_span(i1, i2)}")
        elif tag == "insert":
            parts.append(f"{count_of(j2 - j1)} added at {_span(j1, j2)}")
        elif tag == "replace" and i2 - i1 == j2 - j1:
            parts.append(f"{count_of(i2 - i1)} changed at {_span(i1, i2)}")
        elif tag == "replace":
            parts.append(f"{count_of(i2 - i1)} replaced by {j2 - j1} at {_span(i1, i2)}")
        else:
            continue
        removed += i2 - i1
        added += j2 - j1
    if len(parts) <= SUMMARY_PARTS:
        return "; ".join(parts)
    first = next(i1 for tag, i1, *_ in ops if tag != "equal")
    return f"{len(parts)} changes from token {first}: {removed} old tokens replaced by {added} new"


def token_rows(old: golden_file.Golden, new: golden_file.Golden, context: int = 3) -> list[str]:
    """Aligned rows around each change: `- 106 1313 'type'` (old), `+ 106 ...` (new), context."""
    groups = list(difflib.SequenceMatcher(None, old.ids, new.ids, autojunk=False)
                  .get_grouped_opcodes(context))
    if not groups or old.ids == new.ids:
        return []
    pos_width = len(str(max(len(old.ids), len(new.ids))))
    id_width = max(len(str(t)) for t in [*old.ids, *new.ids])

    def row(mark: str, pos: int, ids: list[int], pieces: list[str]) -> str:
        return f"{mark} {pos:>{pos_width}} {ids[pos]:>{id_width}} {pieces[pos]!r}"

    rows = []
    for group in groups:
        i1, j1 = group[0][1], group[0][3]
        i2, j2 = group[-1][2], group[-1][4]
        rows.append(f"@@ old {_range(i1, i2)}, new {_range(j1, j2)} @@")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                rows += [row(" ", i, old.ids, old.pieces) for i in range(a1, a2)]
                continue
            rows += [row("-", i, old.ids, old.pieces) for i in range(a1, a2)]
            rows += [row("+", j, new.ids, new.pieces) for j in range(b1, b2)]
    if len(rows) > ROW_LIMIT:
        rest = len(rows) - ROW_LIMIT
        rows = rows[:ROW_LIMIT] + [f"… {rest} more rows"]
    return rows


def _range(a: int, b: int) -> str:
    return f"{a}-{b - 1}" if b > a else f"{a} (none)"


def _cut(text: str) -> str:
    if len(text) <= SPAN_LIMIT:
        return repr(text)
    return f"{text[:SPAN_LIMIT // 2]!r} … {text[-SPAN_LIMIT // 2:]!r} ({len(text)} characters)"


def text_rows(old: str | None, new: str | None) -> list[str]:
    """The rendered prompt's changed span (common prefix and suffix cut), with some context."""
    if old is None or new is None or old == new:
        return []
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    removed, added = old[start:len(old) - end], new[start:len(new) - end]
    if removed and added:
        what = f"{count_of(len(removed), 'character')} replaced by {len(added)}"
    elif removed:
        what = f"{count_of(len(removed), 'character')} removed"
    else:
        what = f"{count_of(len(added), 'character')} added"
    lo = max(0, start - TEXT_CONTEXT)
    lines = [f"@@ text at character {start}: {what} @@"]
    for mark, text, span in (("-", old, removed), ("+", new, added)):
        before = text[lo:start]
        after = text[start + len(span):start + len(span) + TEXT_CONTEXT]
        lead = "…" if lo > 0 else ""
        tail = "…" if start + len(span) + TEXT_CONTEXT < len(text) else ""
        lines.append(f"{mark} {lead}{before!r} {_cut(span) if span else '(nothing)'} {after!r}{tail}")
    return lines
