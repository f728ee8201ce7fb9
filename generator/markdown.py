"""GitHub-flavoured Markdown pieces shared by the check report and the golden diff.

A report is read twice: rendered on GitHub (a PR comment, the job summary) and as plain text (a
terminal, a downloaded artifact). So tables are padded to line up, code spans and fences grow
past any backticks in what they quote, and a long part is folded in `<details>`, which GitHub
renders closed and a plain-text reader skips over.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable

PAD_LIMIT = 40_000  # characters a padded table may take; a PR comment holds 65,536


def code(text: str) -> str:
    """An inline code span that survives a GFM table: pipes escaped, backticks fenced around."""
    text = text.replace("|", "\\|")
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or run else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def escape(text: str) -> str:
    """Prose on one line with no character that would start markup or end a table cell."""
    return re.sub(r"([\\`*|<\[\]])", r"\\\1", " ".join(text.split()))


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A GFM table, its columns padded so the plain text lines up too (unless that makes it huge)."""
    widths = [max(3, max(len(str(c)) for c in column)) for column in zip(header, *rows)]
    if sum(widths) * (len(rows) + 2) > PAD_LIMIT:
        widths = [3] * len(widths)

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    return [line(header), line("-" * w for w in widths), *(line(r) for r in rows)]


def fenced(text: str, info: str = "text") -> list[str]:
    """A fenced code block longer than any backtick run inside it."""
    run = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (run + 1)
    return [f"{fence}{info}", text, fence]


def code_block(text: str, language: str = "") -> list[str]:
    """`text` fenced, the fence longer than any run of backticks inside it (a template that
    writes ``` would otherwise end the block)."""
    import re

    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + language, *text.splitlines(), fence]


def fold(summary: str, body: list[str]) -> list[str]:
    """`body` in a closed <details> block titled `summary` (plain text, escaped here). The blank
    lines around the body make GitHub render the Markdown inside it."""
    return [f"<details><summary>{html.escape(summary, quote=False)}</summary>", "", *body, "", "</details>"]
