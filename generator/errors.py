"""One error type for everything a user can get wrong or an engine can refuse, and the one way
an exception becomes a line of text.

The CLI turns a GoldensError into one line on stderr and exit code 2, so bad input never
surfaces as a traceback. Anything else escaping is a bug in goldens itself: the CLI says so in
one `internal error` line, also exit 2 (exit 1 is only ever a verdict: drift found).
"""


class GoldensError(Exception):
    """A problem the user can act on; the message is the whole explanation, on one line."""

    exit_code = 2


class EngineError(GoldensError):
    """An engine that could not answer: unreachable, HTTP error, malformed reply."""


class Refused(EngineError):
    """The engine answered, and its answer is that it will not render this request (a template
    that raises, an HTTP 400 naming the template error). A golden whose reference also refused
    expects exactly this."""


class Unreachable(EngineError):
    """The engine stopped answering: no connection, a connection dropped, no whole reply within
    the deadline. Unlike a bad reply to one request, this is the server, not the case."""


class NoProbe(EngineError):
    """goldens' own probe does not build against this release (llama.cpp's parse harness, which
    links the server's functions, when they changed shape): the release was not asked, so this is
    no answer of the release's, and one remembered would outlive a probe that builds again."""


import re

# How an exception is said in one line. A golden records a template's refusal in these words, so
# they live in a module of the render (the regenerate index hashes it), not here: an edit to the
# error contract renders nothing again.
from generator.error_text import describe, first_line  # noqa: E402,F401

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with control characters shown escaped (`\x1b`, `\x07`, `\x00`): what a server
    says never drives the terminal (colours, a title, a bell, a cleared screen)."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text.replace("\t", " "))


def one_line(message: str) -> str:
    """A message as one line, control characters escaped. One that carries a log tail (a server
    that would not start) keeps its first line, which names the log file, and the tail's last
    line, which usually says why."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return printable(" ".join(lines[:1] + lines[1:][-1:]))


def stable_line(error: BaseException) -> str:
    """first_line with a server's address as `<server>`: its port changes per run, and a ledger
    entry or a remembered answer must not."""
    return re.sub(r"https?://[^\s/]+:\d+", "<server>", first_line(error))
