"""The ledger's parse entries (`<model>/parse/<stem>.<engine>.json`): an engine's reviewed parse
of one case, the golden's bytes plus the engine, the reason and the Observed signature."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import files
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging import ledger
from generator.replay.judging.parse.observation import AXIS, Observed


@dataclass
class Entry:
    case: str
    engine: str
    reason: str
    signature: dict[str, Any]
    path: Path


def read_entry(root: Path, case_id: str, engine: str) -> Entry | None:
    """The engine's reviewed parse entry for a case, if there is one."""
    path = ledger.entry_path(root, case_id, engine)
    if not path.exists():
        return None
    item = golden_file.read(path)
    reason = item.extra.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise GoldensError(f"{path}: a ledger entry needs a non-empty `reason`")
    if item.extra.get("engine") != engine:
        raise GoldensError(f"{path}: `engine` must be {engine!r}")
    signature = item.extra.get("parse")
    if not isinstance(signature, dict) or not ("refused" in signature or "whole" in signature):
        raise GoldensError(f"{path}: a parse ledger entry records the engine's parse under `parse`")
    return Entry(case=item.case, engine=engine, reason=reason, signature=signature, path=path)


def write_entry(root: Path, item: golden_file.Golden, engine: str, reason: str, observed: Observed,
                engine_version: str = "") -> Path:
    """Record the engine's parse of a golden as reviewed (the golden's bytes plus engine, reason
    and the parse)."""
    entry = golden_file.Golden(
        case=item.case, request=item.request, outcome=item.outcome, ids=list(item.ids), pieces=list(item.pieces),
        prompt=None, error=None, provenance=item.provenance,
        extra={"axis": AXIS, "engine": engine, "engine_version": engine_version or None, "reason": reason,
               "parse": observed.signature()},
    )
    path = ledger.entry_path(root, item.case, engine)
    files.atomic_write(path, golden_file.dumps(entry), within=root)
    return path
