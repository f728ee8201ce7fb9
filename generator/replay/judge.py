"""Replay: send goldens through an engine and judge each answer.

An Outcome is one of: `match` (the golden's ids, or the golden's refusal), `known` (exactly the
reviewed ledger entry), `drift` (anything else, with the report), or `error` (the engine could
not answer). Requests go out concurrently: the engines share keep-alive HTTP clients, so a
thread pool is enough to keep a server busy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from generator.engines import Engine, EngineError, Refused, pieces_of
from generator.errors import GoldensError, first_line
from generator.goldens import golden_file
from generator.replay import ledger
from generator.replay.divergence import Divergence, diverge, format_divergence


@dataclass
class Outcome:
    case: str
    engine: str
    status: str  # "match" | "known" | "drift" | "error"
    detail: str = ""
    divergence: Divergence | None = None
    reason: str | None = None  # the ledger's, for "known"

    @property
    def ok(self) -> bool:
        return self.status in ("match", "known")


def judge(engine: Engine, item: golden_file.Golden, root: Path,
          decode: Callable[[Sequence[int]], list[str]] | None = None) -> Outcome:
    """Replay one golden through one engine."""
    entry = ledger.read(root, item.case, engine.name)
    try:
        actual = engine.ids(item.request)
    except Refused as refusal:
        if entry is not None and entry.refused is not None:
            return Outcome(item.case, engine.name, "known", entry.reason, reason=entry.reason)
        if item.outcome == "error" and entry is None:
            return Outcome(item.case, engine.name, "match", f"refused, as the reference did: {item.error}")
        return Outcome(item.case, engine.name, "drift", f"engine refused: {refusal}")
    except EngineError as error:
        return Outcome(item.case, engine.name, "error", str(error))
    if item.outcome == "error":
        return Outcome(item.case, engine.name, "drift",
                       f"the reference refused ({item.error}) but {engine.name} rendered {len(actual)} tokens")
    prompt = getattr(actual, "prompt", None)
    pieces = getattr(actual, "pieces", None)
    if entry is not None and entry.refused is not None:
        return Outcome(item.case, engine.name, "drift",
                       f"{engine.name} now renders {len(actual)} tokens; the ledger entry "
                       f"{entry.path.name} recorded a refusal (was: {entry.reason})")
    if entry is not None:
        if list(actual) == entry.ids:
            return Outcome(item.case, engine.name, "known", entry.reason, reason=entry.reason)
        if list(actual) == item.ids:
            return Outcome(item.case, engine.name, "drift",
                           f"{engine.name} now matches the reference; the ledger entry "
                           f"{entry.path.name} is stale (was: {entry.reason})")
        div = diverge(entry.ids, entry.pieces, entry.prompt, actual, pieces, prompt, decode)
        return Outcome(item.case, engine.name, "drift",
                       "moved from its ledger entry: " + format_divergence(div, "ledger", engine.name),
                       divergence=div)
    div = diverge(item.ids, item.pieces, item.prompt, actual, pieces, prompt, decode)
    if div is None:
        return Outcome(item.case, engine.name, "match")
    return Outcome(item.case, engine.name, "drift", format_divergence(div, "reference", engine.name),
                   divergence=div)


def replay(engine: Engine, goldens: Iterable[golden_file.Golden], root: Path, jobs: int = 8,
           decode: Callable[[Sequence[int]], list[str]] | None = None,
           advance: Callable[[str], None] | None = None) -> list[Outcome]:
    """Judge every golden, `jobs` requests in flight; outcomes in the goldens' order."""
    items = list(goldens)

    def one(item: golden_file.Golden) -> Outcome:
        outcome = judge(engine, item, root, decode)
        if advance is not None:
            advance(item.case)
        return outcome

    if jobs <= 1:
        return [one(item) for item in items]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, items))


def load_goldens(root: Path, case_ids: Iterable[str]) -> list[golden_file.Golden]:
    """The committed goldens of these cases; a missing one is an error that says to regenerate."""
    out = []
    for case_id in case_ids:
        path = golden_file.golden_path(root, case_id)
        if not path.exists():
            raise GoldensError(f"{path}: no golden for case {case_id}; run `goldens regenerate`")
        out.append(golden_file.read(path))
    return out


def record(engine: Engine, item: golden_file.Golden, root: Path, reason: str) -> Path:
    """Record what `engine` gives for a golden as a reviewed divergence (a ledger entry): its own
    ids, or its refusal. Nothing is recorded where the engine matches the reference."""
    if not reason.strip():
        raise GoldensError("a reviewed divergence needs a --reason that says why it is accepted")
    if item.outcome != "ok":
        raise GoldensError(f"{item.case}: the reference refused this case; there are no ids to diverge from")
    try:
        actual = engine.ids(item.request)
    except Refused as refusal:
        # the URL's port changes per run; the ledger must not
        message = re.sub(r"https?://[^\s/]+:\d+", "<server>", first_line(refusal))
        return ledger.write(root, item, engine.name, reason.strip(), [], [], None, refused=message)
    if list(actual) == item.ids:
        raise GoldensError(f"{item.case}: {engine.name} matches the reference; nothing to record")
    return ledger.write(root, item, engine.name, reason.strip(), list(actual), pieces_of(actual),
                                getattr(actual, "prompt", None))
