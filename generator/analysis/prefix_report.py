"""The text `goldens prefix` prints: each request's length, every break with the tokens around
it and its hint, and for a cache-buster the fix and what the fixed client gets."""

from __future__ import annotations

from collections.abc import Sequence

from generator.analysis.busters import BusterResult
from generator.analysis.prefix import Result


def format_result(result: Result, verbose_context: bool = True) -> str:
    """Each request's length and every break, declared or not, with the tokens around it."""
    counts = ", ".join(str(s.messages) for s in result.sent)
    lengths = ", ".join(str(len(s.ids)) if s.refused is None else "refused" for s in result.sent)
    head = (f"{result.label} on {result.engine}: {len(result.sent)} requests of {counts} messages: "
            f"{lengths} tokens")
    lines = [head]
    for s in result.sent:
        if s.refused is not None:
            lines.append(f"  request of {s.messages} messages refused: {s.refused}")
    if not result.breaks:
        lines.append("  no breaks")
    for item in result.breaks:
        status = "declared" if item.declared else "UNDECLARED"
        lines.append(f"  {status} {item.summary()}, {item.earlier_len} vs {item.later_len} tokens")
        if verbose_context:
            shared = " ".join(repr(p) for p in item.shared)
            lines.append(f"    shared  {('…' + shared) if shared else '(start)'}")
            lines.append(f"    earlier »{' '.join(repr(p) for p in item.earlier_pieces) or '(ends here)'}")
            lines.append(f"    later   »{' '.join(repr(p) for p in item.later_pieces) or '(ends here)'}")
        if item.hint:
            lines.append(f"    {item.hint}")
    return "\n".join(lines)


def format_buster(result: BusterResult) -> str:
    """The client's breaks with the tokens around them, the fix, and the fixed client's result."""
    lines = format_result(result.busted).splitlines()
    lines.insert(1, f"  ({result.buster.description})")
    fixed = result.fixed.undeclared
    lines.append(f"  fix: {result.buster.fix}")
    lines.append("  fixed client: " + ("no undeclared breaks" if not fixed
                                       else "; ".join(b.summary() for b in fixed)))
    return "\n".join(lines)


def side_by_side(results: Sequence[Result], engines: Sequence[str]) -> str:
    """One row per conversation, one column per engine: its breaks, where, and whether declared."""

    def cell(result: Result | None) -> str:
        if result is None:
            return "-"
        if not result.breaks:
            return "no break"
        return ", ".join(f"token {b.position} ({b.earlier} -> {b.later} messages)"
                         + ("" if b.declared else " undeclared")
                         for b in result.breaks)

    labels = list(dict.fromkeys(r.label for r in results))
    grid = {(r.label, r.engine): r for r in results}
    rows = [["conversation", *engines]] + [[label, *(cell(grid.get((label, e))) for e in engines)] for label in labels]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)
