"""The golden file format: one JSON file per case, built to be reviewed in a git diff.

Keys are sorted and everything is indented, except `tokens`, which holds one `[id, piece]` pair
per line, so a diff of a golden is a list of the tokens that moved. The `request` keeps its own
key order: templates render tools with `tojson`, which keeps key order, so a sorted copy of a
tool would be a different prompt. Bytes are deterministic
(LF, trailing newline, no floats, no timestamps), writes go through files.atomic_write, and
the reader validates, so a hand-edited file fails with its path and the bad key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import files
from generator.config.request import validate_request
from generator.errors import GoldensError
from generator.json_reader import load_json

FORMAT = 1
_TOKENS_MARK = "\u0000TOKENS\u0000"
_REQUEST_MARK = "\u0000REQUEST\u0000"
_DISPUTED_MARK = "\u0000DISPUTED_TOKENS\u0000"


@dataclass
class Golden:
    case: str  # "qwen3/tools--thinking-off"
    request: dict[str, Any]
    outcome: str  # "ok" | "error"
    ids: list[int]
    pieces: list[str]
    prompt: str | None
    error: str | None
    provenance: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)  # analyses added by later stages

    @property
    def model(self) -> str:
        return self.case.split("/", 1)[0]

    def to_json(self) -> dict[str, Any]:
        data = {
            "format": FORMAT,
            "case": self.case,
            "request": _REQUEST_MARK,
            "outcome": self.outcome,
            "error": self.error,
            "prompt": self.prompt,
            "token_count": len(self.ids),
            "tokens": _TOKENS_MARK,
            "provenance": self.provenance,
        }
        for key, value in self.extra.items():
            if key in data:
                raise ValueError(f"extra key {key!r} would overwrite a golden field")
            data[key] = value
        return data


def _rows(pairs: list, indent: str) -> str:
    """`[id, piece]` pairs one per line, so a diff of them is a list of the tokens that moved."""
    if not pairs:
        return "[]"
    rows = [indent + "  " + json.dumps([token_id, piece], ensure_ascii=False) for token_id, piece in pairs]
    return "[\n" + ",\n".join(rows) + "\n" + indent + "]"


def dumps(golden: Golden) -> str:
    data = golden.to_json()
    disputed = data.get("disputed")
    shown = None  # a dispute's encoder tokens, written one per line as `tokens` are
    if isinstance(disputed, dict) and isinstance(disputed.get("encoder"), dict) and "tokens" in disputed["encoder"]:
        shown = disputed["encoder"]["tokens"]
        data["disputed"] = {**disputed, "encoder": {**disputed["encoder"], "tokens": _DISPUTED_MARK}}
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False)
    marker = json.dumps(_TOKENS_MARK)
    tokens = _rows(list(zip(golden.ids, golden.pieces)), "  ")
    if shown is not None:
        text = text.replace(json.dumps(_DISPUTED_MARK), _rows(shown, "      "), 1)
    request = json.dumps(golden.request, indent=2, ensure_ascii=False).replace("\n", "\n  ")
    text = text.replace(json.dumps(_REQUEST_MARK), request, 1)
    return text.replace(marker, tokens, 1) + "\n"


def loads(text: str | bytes, where: str) -> Golden:
    data = load_json(text, where)
    if not isinstance(data, dict):
        raise GoldensError(f"{where}: a golden is a JSON object")
    for key in ("case", "request", "outcome", "tokens", "provenance"):
        if key not in data:
            raise GoldensError(f"{where}: missing key {key!r}")
    if not isinstance(data["case"], str) or not is_case_id(data["case"]):
        raise GoldensError(f"{where}: case must be a string like 'qwen3/tools' or 'qwen3/parse/call', "
                           f"not {data['case']!r}")
    validate_request(data["request"], f"{where}: request")  # an engine must never be sent junk
    if data["outcome"] not in ("ok", "error"):
        raise GoldensError(f"{where}: outcome must be 'ok' or 'error', not {data['outcome']!r}")
    ids, pieces = [], []
    for i, row in enumerate(data["tokens"] if isinstance(data["tokens"], list) else [None]):
        if (not isinstance(row, list) or len(row) != 2 or type(row[0]) is not int
                or not isinstance(row[1], str)):
            raise GoldensError(f"{where}: tokens[{i}] must be [id, piece] with an integer id")
        ids.append(row[0])
        pieces.append(row[1])
    if "token_count" in data and type(data["token_count"]) is not int:
        raise GoldensError(f"{where}: token_count is {data['token_count']!r} "
                           f"({type(data['token_count']).__name__}), not an integer")
    if "token_count" in data and data["token_count"] != len(ids):
        raise GoldensError(f"{where}: token_count {data['token_count']} but {len(ids)} tokens listed")
    known = {"format", "case", "request", "outcome", "error", "prompt", "token_count", "tokens", "provenance"}
    return Golden(
        case=data["case"], request=data["request"], outcome=data["outcome"], ids=ids, pieces=pieces,
        prompt=data.get("prompt"), error=data.get("error"), provenance=data["provenance"],
        extra={k: v for k, v in data.items() if k not in known},
    )


def read(path: Path) -> Golden:
    """A golden or ledger entry from disk; its `case` must be the one its path names
    (`<root>/<model>/<stem>[.<engine>].json`), so a copied or renamed file is never judged as
    another case."""
    text = files.read_bytes(path)
    item = loads(text, str(path))
    expected = f"{path.parent.name}/{path.name.split('.', 1)[0]}"
    if path.parent.name == PARSE_FOLDER:  # goldens/<model>/parse/<stem>.json: a parse golden
        expected = f"{path.parent.parent.name}/{expected}"
    if item.case != expected:
        raise GoldensError(f"{path}: its case is {item.case!r} but its path names {expected!r}")
    return item


PARSE_FOLDER = "parse"  # config/parse_cases.py FOLDER: a model's parse goldens, beside its render goldens


def is_case_id(case: str) -> bool:
    """`<model>/<stem>`, or `<model>/parse/<stem>` for a parse case."""
    parts = case.split("/")
    return len(parts) == 2 or (len(parts) == 3 and parts[1] == PARSE_FOLDER)


def is_parse(item: Golden) -> bool:
    """A parse golden: output ids and the message they should parse to (replay/judging/parse/judge.py)."""
    return item.extra.get("axis") == PARSE_FOLDER


def golden_path(root: Path, case_id: str) -> Path:
    return root / f"{case_id}.json"


def is_golden_file(path: Path) -> bool:
    """Goldens are `<shape>[--<variant>].json`; ledger entries carry an engine: `<stem>.<engine>.json`."""
    return path.suffix == ".json" and "." not in path.stem and not path.name.startswith(".")
