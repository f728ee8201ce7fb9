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

from generator.engines import Engine, EngineError, Refused, reported_version
from generator.errors import GoldensError
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
    version: str = ""  # what the engine said it is (llama-server's build_info, vLLM's /version)

    @property
    def ok(self) -> bool:
        return self.status in ("match", "known")


def judge(engine: Engine, item: golden_file.Golden, root: Path,
          decode: Callable[[Sequence[int]], list[str]] | None = None,
          label: str | None = None) -> Outcome:
    """Replay one golden through one engine; `label` names it in the outcome when several
    versions of one engine run (`llama-server@11000`), the ledger is the engine's own."""
    label = label or engine.name
    entry = ledger.read(root, item.case, engine.name)
    try:
        actual = engine.ids(item.request)
    except Refused as refusal:
        if entry is not None and entry.refused is not None:
            return Outcome(item.case, label, "known", entry.reason, reason=entry.reason)
        if item.outcome == "error" and entry is None:
            return Outcome(item.case, label, "match", f"refused, as the reference did: {item.error}")
        return Outcome(item.case, label, "drift", f"engine refused: {refusal}")
    except EngineError as error:
        return Outcome(item.case, label, "error", str(error))
    if item.outcome == "error":
        return Outcome(item.case, label, "drift",
                       f"the reference refused ({item.error}) but {label} rendered {len(actual)} tokens")
    prompt = getattr(actual, "prompt", None)
    pieces = getattr(actual, "pieces", None)
    if entry is not None and entry.refused is not None:
        return Outcome(item.case, label, "drift",
                       f"{label} now renders {len(actual)} tokens; the ledger entry "
                       f"{entry.path.name} recorded a refusal (was: {entry.reason})")
    if entry is not None:
        if list(actual) == entry.ids:
            return Outcome(item.case, label, "known", entry.reason, reason=entry.reason)
        if list(actual) == item.ids:
            return Outcome(item.case, label, "drift",
                           f"{label} now matches the reference; the ledger entry "
                           f"{entry.path.name} is stale (was: {entry.reason})")
        div = diverge(entry.ids, entry.pieces, entry.prompt, actual, pieces, prompt, decode)
        return Outcome(item.case, label, "drift",
                       "moved from its ledger entry: " + format_divergence(div, "ledger", label),
                       divergence=div)
    div = diverge(item.ids, item.pieces, item.prompt, actual, pieces, prompt, decode)
    if div is None:
        return Outcome(item.case, label, "match")
    return Outcome(item.case, label, "drift", format_divergence(div, "reference", label),
                   divergence=div)


def replay(engine: Engine, goldens: Iterable[golden_file.Golden], root: Path, jobs: int = 8,
           decode: Callable[[Sequence[int]], list[str]] | None = None,
           advance: Callable[[str], None] | None = None,
           label: str | None = None) -> list[Outcome]:
    """Judge every golden, `jobs` requests in flight; outcomes in the goldens' order, each
    carrying the version the engine reports."""
    items = list(goldens)
    version = reported_version(engine)

    def one(item: golden_file.Golden) -> Outcome:
        outcome = judge(engine, item, root, decode, label)
        outcome.version = version
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
        message = re.sub(r"https?://[^\s/]+:\d+", "<server>", str(refusal).splitlines()[0])
        return ledger.write(root, item, engine.name, reason.strip(), [], [], None, refused=message,
                            engine_version=reported_version(engine))
    if list(actual) == item.ids:
        raise GoldensError(f"{item.case}: {engine.name} matches the reference; nothing to record")
    pieces = getattr(actual, "pieces", None)
    if pieces is None or len(pieces) != len(actual):
        pieces = [""] * len(actual)
    return ledger.write(root, item, engine.name, reason.strip(), list(actual), list(pieces),
                        getattr(actual, "prompt", None), engine_version=reported_version(engine))
