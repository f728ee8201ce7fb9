"""The `--json` documents' one spelling: what a script reads of `goldens models`, `engines`,
`diff`, `bisect` and `history`. Each document is built by the stage it describes
(config/listing.py, goldens/diff.py, replay/releases/history.py); this module only writes it.

One JSON document on stdout per run (human lines, if any, go to stderr), keys sorted, each
document naming its kind and version in `schema` (`goldens.models/1`): a key is never renamed or
removed within a version, only added. docs/commands.md ("Reading results from scripts") lists the keys.
"""

from __future__ import annotations

import json
from typing import Any


def dumps(kind: str, document: dict[str, Any]) -> str:
    return json.dumps({"schema": f"goldens.{kind}/1", **document}, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
