"""THE judgement of one answer against a golden: the function `goldens check` (through
judge.py) and the pytest snapshots (replay/judging/snapshot.py) both call, so the CI gate and the
test suite cannot disagree.

It compares and asks nothing: the engine's answer (ids, a prompt count or a refusal: answers.py),
the golden, the engine's reviewed ledger entry for the case and the reviewed causes covering the
engine and model decide the Outcome. An entry is the case's own and comes first; a cause explains
cases by an edit or a refusal text. An answer judged from a count has level "count", so reports
can mark it: equal lengths are not called a match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from generator.engines import Ids, PromptCount, Refused, pieces_of
from generator.errors import stable_line
from generator.goldens import golden_file
from generator.replay.judging import causes as causes_, ledger
from generator.replay.judging.answers import Answer
from generator.replay.judging.divergence import diverge, format_divergence
from generator.replay.judging.outcome import Outcome


def verdict(item: golden_file.Golden, entry: ledger.Entry | None, engine: str, got: Answer,
            decode: Callable[[Sequence[int]], list[str]] | None = None,
            causes: Sequence[causes_.Cause] = ()) -> Outcome:
    """THE judgement of one answer against a golden, the engine's reviewed ledger entry and the
    reviewed causes covering this engine and model (an entry is the case's own and comes first)."""
    outcome = _verdict(item, entry, engine, got, decode, causes)
    if not outcome.ok:
        outcome.advice = normalized_advice(item, engine)
    return outcome


def _verdict(item: golden_file.Golden, entry: ledger.Entry | None, engine: str, got: Answer,
             decode: Callable[[Sequence[int]], list[str]] | None, causes: Sequence[causes_.Cause]) -> Outcome:
    if isinstance(got, Refused):
        if entry is not None and entry.refused is not None:
            return Outcome(item.case, engine, "known", entry.reason, reason=entry.reason, refused=True,
                           klass=entry.klass, cause=entry.cause[0] if entry.cause else None)
        if item.outcome == "error" and entry is None:
            return Outcome(item.case, engine, "both-refuse", f"refused, as the reference did: {item.error}",
                           reason=item.error, refused=True)
        message = stable_line(got)
        refusal = next((c for c in causes if entry is None and c.explains_refusal(message, item)), None)
        if refusal is not None:
            return Outcome(item.case, engine, "known", f"cause {refusal.name}: {refusal.reason}", refused=True,
                           reason=refusal.reason, cause=refusal.name, klass=refusal.klass)
        return Outcome(item.case, engine, "drift", f"engine refused: {got}", refused=True,
                       kind="ledger-moved" if entry is not None else "drift")
    if isinstance(got, PromptCount):
        return judge_count(engine, item, entry, got)
    actual = Ids.of(got)
    prompt, pieces = actual.prompt, actual.pieces
    refuses = item.outcome == "error"  # then only a reviewed entry's ids can pass (judged below)
    if refuses and (entry is None or entry.refused is not None):
        return Outcome(item.case, engine, "drift",
                       f"the reference refused ({item.error}) but {engine} rendered {len(actual)} tokens")
    if entry is not None and entry.refused is not None:
        return Outcome(item.case, engine, "drift",
                       f"{engine} now renders {len(actual)} tokens; the ledger entry "
                       f"{entry.path.name} recorded a refusal (was: {entry.reason})", kind="ledger-moved")
    explained = next((c for c in causes if not refuses and c.explains(item.ids, actual, item)), None)
    if entry is not None:
        if list(actual) == entry.ids:
            also = f" (the cause {explained.name} explains it too: this entry is not needed)" if explained else ""
            return Outcome(item.case, engine, "known", entry.reason + also, reason=entry.reason,
                           cause=explained.name if explained else entry.cause[0] if entry.cause else None,
                           klass=entry.klass)
        if not refuses and list(actual) == item.ids:
            return Outcome(item.case, engine, "drift",
                           f"{engine} now matches the reference; the ledger entry "
                           f"{entry.path.name} is stale (was: {entry.reason})", kind="ledger-fixed")
        div = diverge(entry.ids, entry.pieces, entry.prompt, actual, pieces, prompt, decode)
        moved = "moved from its ledger entry (the reference refuses this case): " if refuses else \
            "moved from its ledger entry: "
        return Outcome(item.case, engine, "drift", moved + format_divergence(div, "ledger", engine),
                       divergence=div, kind="ledger-moved")
    div = diverge(item.ids, item.pieces, item.prompt, actual, pieces, prompt, decode)
    if div is None:
        return Outcome(item.case, engine, "match")
    if explained is not None:
        return Outcome(item.case, engine, "known", f"cause {explained.name}: {explained.describe()}: "
                       f"{explained.reason}", reason=explained.reason, cause=explained.name, divergence=div,
                       klass=explained.klass)
    edit = causes_.first_edit(item.ids, item.pieces, list(actual), pieces_of(actual, decode))
    return Outcome(item.case, engine, "drift", format_divergence(div, "reference", engine),
                   divergence=div, edit=edit.data() if edit is not None else None)


def normalized_advice(item: golden_file.Golden, engine: str) -> str:
    """For a body the reference normalized before its template ran (the golden's
    `normalization`): what the reference did, and how to accept the engine's answer."""
    record = item.extra.get("normalization")
    if not isinstance(record, dict) or not record.get("applied"):
        return ""
    applied = [str(a) for a in record["applied"]]
    did = "; ".join(applied[:3]) + (f"; and {len(applied) - 3} more" if len(applied) > 3 else "")
    as_sent = record.get("as_sent") or {}
    sent = (f"; as sent, the template refused ({as_sent.get('error')})" if as_sent.get("outcome") == "error"
            else "; as sent, the template rendered the same prompt" if as_sent.get("same_prompt")
            else "; as sent, the template rendered another prompt" if as_sent.get("outcome") == "ok" else "")
    name = engine.partition("@")[0]
    return (f"the reference normalized this body before its template ran ({did}{sent}); if {name}'s "
            f"answer is acceptable, record it: goldens ledger --engine {name} --case {item.case} --reason '...'")


def judge_count(engine: str, item: golden_file.Golden, entry: ledger.Entry | None,
                count: PromptCount) -> Outcome:
    """Judge a prompt token count against the golden's length (or the ledger entry's): the
    only verdicts are "count" (equal), "known" and "drift", each with level "count"."""
    n = count.tokens

    def outcome(status: str, detail: str, reason: str | None = None, kind: str = "") -> Outcome:
        return Outcome(item.case, engine, status, detail, reason=reason, level="count", kind=kind)

    if item.outcome == "error" and (entry is None or entry.refused is not None):
        return outcome("drift", f"count only: the reference refused ({item.error}) but {engine} "
                                f"evaluated {n} prompt tokens")
    if entry is not None and entry.refused is not None:
        return outcome("drift", f"count only: {engine} now evaluates {n} prompt tokens; the ledger "
                                f"entry {entry.path.name} recorded a refusal (was: {entry.reason})", kind="ledger-moved")
    if entry is not None:
        if n == len(entry.ids):
            known = outcome("known", entry.reason, reason=entry.reason)
            known.klass = entry.klass
            return known
        if n == len(item.ids):
            return outcome("drift", f"count only: {engine} now has the golden's length ({n} tokens); "
                                    f"the ledger entry {entry.path.name} may be stale (was: {entry.reason})",
                           kind="ledger-fixed")
        return outcome("drift", f"count only: {count.field} {n}, {_longer(n, len(entry.ids))} than the "
                                f"ledger entry's {len(entry.ids)} (the golden has {len(item.ids)})",
                       kind="ledger-moved")
    if n == len(item.ids):
        return outcome("count", f"count only: {count.field} {n}, the golden's length (the ids were not returned)")
    return outcome("drift", f"count only: {count.field} {n}, {_longer(n, len(item.ids))} than the "
                            f"golden's {len(item.ids)}")


def _longer(n: int, expected: int) -> str:
    """'9 tokens shorter', '1 token longer'."""
    difference = abs(n - expected)
    return f"{difference} token{'s' if difference != 1 else ''} {'longer' if n > expected else 'shorter'}"

