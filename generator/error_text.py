"""How an exception is said in one line: the words a golden records for a template's refusal.

Part of the render (generator/goldens/index.py hashes it); generator/errors.py re-exports both
functions for every other caller.
"""

from __future__ import annotations


def first_line(error: BaseException) -> str:
    """The first line of an exception's message, else its type name.

    Library errors often carry several lines (a Jinja caret excerpt, a pydantic listing, a hub
    hint); a one-line report keeps the line that names the problem.
    """
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def describe(error: BaseException) -> str:
    """`Type: first line of the message` (just the type when there is no message): stable
    enough to be recorded, as goldens record a template's refusal."""
    name = type(error).__name__
    return f"{name}: {first_line(error)}" if str(error).strip() else name
