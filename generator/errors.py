"""One error type for everything a user can get wrong or an engine can refuse.

The CLI turns a GoldensError into one line on stderr and exit code 2, so bad input never
surfaces as a traceback. Anything else escaping is a bug in goldens itself.
"""


class GoldensError(Exception):
    """A problem the user can act on; the message is the whole explanation, on one line."""

    exit_code = 2
