"""A stand-in endpoint's disagreement with the engine's serving path, found and judged.

Where an engine is read through a stand-in (llama-server's /apply-template + /tokenize, vLLM's
/tokenize), `judge --confirm` also sends the case down the serving path. A stand-in that
disagrees with serving is a finding of its own (an Outcome with `stand_in` set, reported in the
column "<engine> stand-in"), never the engine's verdict. It is judged like a divergence: against
a reviewed stand-in ledger entry (`<case>.<engine>.stand-in.json`, the stand-in's own ids), so a
reviewed one passes, a new one, one that moved or one fixed upstream fails.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from generator.engines import Engine, Ids, PromptCount, Refused, Served, first_divergence
from generator.goldens import golden_file
from generator.replay.judging import ledger
from generator.replay.judging.answers import Answer, stand_in_name
from generator.replay.judging.divergence import diverge, format_divergence
from generator.replay.judging.outcome import Outcome


def finding(case: str, engine: Engine, got: Answer, served: Served,
                      label: str) -> str | None:
    """How the stand-in's answer disagrees with the serving path's, in words; None when they agree."""
    stand_in = stand_in_name(engine)
    if isinstance(got, Refused):
        if served.refused is not None:
            return None
        fed = ", ".join(f"{where} fed {count} tokens" for where, count in served.counts.items())
        return f"{engine.name}: {stand_in} refused ({got}) but {fed}"
    if served.refused is not None:
        return (f"{engine.name}: {stand_in} gives {len(got)} tokens but {served.endpoint} "
                f"refused ({served.refused})")
    if served.ids is not None:
        index = first_divergence(list(got), list(served.ids))
        problems = [] if index is None else [
            f"{served.endpoint} fed the model {len(served.ids)} tokens, the first difference at token {index}"]
    else:
        problems = [f"{where} is {count}" for where, count in served.counts.items() if count != len(got)]
    if not problems:
        return None
    judged = ("the serving path's ids are judged in the " + engine.name + " column"
              if served.ids is not None else f"the {engine.name} column judges the stand-in's ids")
    return f"{engine.name}: {stand_in} gives {len(got)} tokens but {'; '.join(problems)} ({judged})"


def judge_finding(item: golden_file.Golden, entry: ledger.Entry | None, label: str, stand_in: str,
                  got: Answer, finding: str | None,
                  decode: Callable[[Sequence[int]], list[str]] | None = None) -> Outcome | None:
    """A stand-in's disagreement with serving, judged against its reviewed stand-in ledger entry:
    none and no entry is nothing to report; an entry whose ids (or refusal) the stand-in still
    gives while disagreeing is `known`; a new disagreement is a `drift`; an entry the stand-in
    moved from is `ledger-moved`, one it no longer needs (the stand-in agrees) `ledger-fixed`."""
    def outcome(status: str, detail: str, **extra) -> Outcome:
        return Outcome(item.case, label, status, detail, stand_in=stand_in, **extra)

    if finding is None:
        if entry is None:
            return None
        return outcome("drift", f"{stand_in} now agrees with the serving path; the stand-in ledger entry "
                                f"{entry.path.name} is stale (was: {entry.reason})", kind="ledger-fixed")
    if entry is None:
        return outcome("drift", finding)
    if isinstance(got, Refused):
        if entry.refused is not None:
            return outcome("known", entry.reason, reason=entry.reason, refused=True)
        return outcome("drift", f"{finding}; the stand-in ledger entry {entry.path.name} recorded "
                                f"{len(entry.ids)} tokens", kind="ledger-moved", refused=True)
    if isinstance(got, PromptCount) or entry.refused is not None:
        return outcome("drift", f"{finding}; the stand-in ledger entry {entry.path.name} recorded "
                                f"{'a refusal' if entry.refused is not None else 'ids'}", kind="ledger-moved")
    if list(got) == entry.ids:
        return outcome("known", entry.reason, reason=entry.reason)
    got = Ids.of(got)
    div = diverge(entry.ids, entry.pieces, entry.prompt, got, got.pieces, got.prompt, decode)
    return outcome("drift", f"{finding}; moved from its stand-in ledger entry: "
                            + format_divergence(div, "ledger", stand_in), divergence=div, kind="ledger-moved")

