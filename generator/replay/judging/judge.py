"""Replay: send goldens through an engine and judge each answer. The one judge.

`verdict` is the judging function: `goldens check` (through `judge`/`replay`) and the pytest
snapshots (replay/judging/snapshot.py) both call it, so the CI gate and the test suite cannot disagree.

An Outcome is one of: `match` (the golden's ids), `both-refuse` (the reference and the engine
both refused: it passes, but nothing was rendered, so it is never counted as a match), `known`
(exactly the reviewed ledger entry, or the golden's ids with a reviewed cause's edit made:
replay/judging/causes.py), `drift` (anything else, with the report and the first edit between the ids),
or `error` (the engine could not answer, so nothing was judged); and for an engine that reports
only how many prompt tokens it evaluated, `count` (the golden's length; the ids themselves were
never seen). An HTTP 4xx/5xx about one request is a refusal (generator/http.py's one rule), so
it is judged here like a template's raise; only an engine that cannot answer is an error. Every outcome
judged from a count has level "count", so reports can mark it: equal lengths are not called a
match. Requests go out concurrently from a thread pool.

Where an engine is read through a stand-in endpoint (llama-server's /apply-template +
/tokenize, vLLM's /tokenize), `confirm` also sends the case down the serving path: vLLM's
served prompt ids are what is judged, llama-server's served counts must equal the stand-in's.
A stand-in that disagrees with serving is a finding of its own (an Outcome with `stand_in` set,
reported in the column "<engine> stand-in"), never the engine's verdict. It is judged like a
divergence: against a reviewed stand-in ledger entry (`<case>.<engine>.stand-in.json`, the stand-in's
own ids), so a reviewed one passes, a new one, one that moved or one fixed upstream fails.

The verdict is data: `status` decides the exit code, `kind` (a key of outcome.py's KIND_STATUS) says what happened in a
word reports look up, `divergence` where; reports parse none of the prose in `detail`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from generator import http
from generator.config import engine_registry
from generator.config.models import ReviewedDispute
from generator.engines import (
    Engine,
    EngineError,
    Ids,
    PromptCount,
    Refused,
    Served,
    Unreachable,
    first_divergence,
    pieces_of,
    reported_version,
)
from generator.errors import GoldensError, stable_line
from generator.goldens import golden_file
from generator.replay.judging import causes as causes_, disputes, ledger
from generator.replay.judging.divergence import diverge, format_divergence
from generator.replay.judging.outcome import Outcome

Answer = Ids | PromptCount | Refused  # what an engine made of a request: ids, a count, or a refusal


def answer(engine: Engine, request: dict) -> Answer:
    """The engine's answer to a request: its ids, or the Refused it raised. Any other failure
    (an EngineError) propagates: that is no answer at all."""
    try:
        got = engine.ids(request)
    except Refused as refusal:
        return refusal
    return got if isinstance(got, PromptCount) else Ids.of(got)


def judged(engine: Engine, request: dict) -> Answer:
    """What `check` judges for a request: the serving path's answer where it returns ids (or
    refuses), as vLLM's /v1/chat/completions does, else the engine's own answer."""
    got = answer(engine, request)
    served = _serve(engine, request, got)
    serving = served.answer() if served is not None else None
    return serving if serving is not None else got


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


def judge(engine: Engine, item: golden_file.Golden, root: Path,
          decode: Callable[[Sequence[int]], list[str]] | None = None, confirm: bool = False,
          label: str | None = None, reviews: Sequence[ReviewedDispute] = ()) -> Outcome:
    """Replay one golden through one engine (and, with `confirm`, down its serving path);
    `label` names it in the outcome when several versions of one engine run
    (`llama-server@11000`); the ledger is the engine's own. A golden whose references disagree
    is judged against the one `reviews` (models.yaml references.disputes) names, and against no
    engine while none does (replay/judging/disputes.py)."""
    label = label or engine.name
    against = disputes.judged_against(item, reviews)
    if against is None:
        return Outcome(item.case, label, "disputed", disputes.describe(item), kind="disputed")
    item = against
    if golden_file.is_parse(item):
        from generator.replay.judging import parse_judge

        return parse_judge.judge(engine, item, root, label)
    entry = ledger.read(root, item.case, engine.name)
    covering = causes_.covering(root, engine.name, item.case.partition("/")[0])
    try:
        got = answer(engine, item.request)
        served = _serve(engine, item.request, got) if confirm else None
    except EngineError as error:
        return Outcome(item.case, label, "error", str(error),
                       unreachable=isinstance(error, Unreachable))
    except Exception as error:  # a bug (ours or an engine library's): this case is not judged
        return Outcome(item.case, label, "error",
                       f"{label}: internal error: {type(error).__name__}: {error}")
    if served is None:
        return verdict(item, entry, label, got, decode, covering)
    serving = served.answer()
    outcome = verdict(item, entry, label, serving if serving is not None else got, decode, covering)
    stand_in = _stand_in(engine)
    finding = _stand_in_finding(item.case, engine, got, served, label)
    outcome.finding = judge_finding(item, ledger.read_stand_in(root, item.case, engine.name), label,
                                    stand_in, got, finding, decode)
    return outcome


def _stand_in(engine: Engine) -> str:
    """The stand-in endpoint the engine's registry entry declares, as reports name it."""
    return engine_registry.capabilities(engine.name).stand_in or "stand-in"


def _serve(engine: Engine, request: dict, got: Answer) -> Served | None:
    """The serving path's answer, for an engine whose registry entry declares a stand-in and
    that reads one now (vLLM's managed render server does not: its render endpoint is the
    serving path's own renderer, `reads_stand_in` False)."""
    if not engine_registry.capabilities(engine.name).stand_in or not getattr(engine, "reads_stand_in", True):
        return None
    return engine.serve(request, None if isinstance(got, (Refused, PromptCount)) else list(got))


def _stand_in_finding(case: str, engine: Engine, got: Answer, served: Served,
                      label: str) -> str | None:
    """How the stand-in's answer disagrees with the serving path's, in words; None when they agree."""
    stand_in = _stand_in(engine)
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


def replay(engine: Engine, goldens: Iterable[golden_file.Golden], root: Path, jobs: int = 8,
           decode: Callable[[Sequence[int]], list[str]] | None = None,
           advance: Callable[[str], None] | None = None, confirm: bool = False,
           halt: Callable[[], str | None] | None = None, label: str | None = None,
           reviews: Sequence[ReviewedDispute] = ()) -> list[Outcome]:
    """Judge every golden, `jobs` requests in flight; outcomes in the goldens' order, each
    followed by its stand-in finding if it has one, and each carrying the version the engine
    reports.

    An engine that stops answering (a timeout, a refused or dropped connection) is not sent the
    remaining cases: they are errors carrying that fault, so a dead server costs one deadline,
    not one per case. `halt` may name a reason to stop too (the run's own deadline)."""
    items = list(goldens)
    fault: list[str] = []
    lock = threading.Lock()
    version = reported_version(engine)

    interrupted = threading.Event()  # Ctrl-C: the cases still queued are not sent
    if getattr(engine, "renders_here", False):  # a template renders in this process: on its main
        jobs = 1  # thread, where the render deadline and Ctrl-C reach every part of it (budget.py)

    def one(item: golden_file.Golden) -> Outcome:
        reason = (("not judged: the run was interrupted" if interrupted.is_set() else None)
                  or (halt() if halt is not None else None) or (fault[0] if fault else None))
        if reason is None:
            outcome = judge(engine, item, root, decode, confirm, label, reviews)
        if reason is not None:
            outcome = Outcome(item.case, label or engine.name, "error", reason)
        elif outcome.unreachable:
            with lock:
                fault.append(outcome.detail)
        outcome.version = version
        if outcome.finding is not None:
            outcome.finding.version = version
        if advance is not None:
            advance(item.case)
        return outcome

    if jobs <= 1:
        results = [one(item) for item in items]
    else:
        pool = ThreadPoolExecutor(max_workers=jobs)
        try:
            results = list(pool.map(one, items))
        except BaseException:  # Ctrl-C, SIGTERM: drop the queue and cut the requests in flight
            interrupted.set()
            pool.shutdown(wait=False, cancel_futures=True)
            http.cancel_all()
            raise
        pool.shutdown()
    out = []
    for outcome in results:
        out.append(outcome)
        if outcome.finding is not None:
            out.append(outcome.finding)
    return out


def record(engine: Engine, item: golden_file.Golden, root: Path, reason: str, stand_in: bool = False,
           klass: str | None = None, upstream: Sequence[str] = ()) -> Path:
    """Record what `engine` gives for a golden as a reviewed divergence (a ledger entry): its own
    ids, or its refusal, as `check` judges them (the serving path's where it returns ids, as
    vLLM's does). Nothing is recorded where the engine matches the reference. With `stand_in`,
    record instead the engine's stand-in endpoint where it disagrees with the serving path."""
    if not reason.strip():
        raise GoldensError("a reviewed divergence needs a --reason that says why it is accepted")
    if golden_file.is_parse(item):
        from generator.replay.judging import parse_judge

        if stand_in:
            raise GoldensError(f"{item.case}: a parse case has no stand-in endpoint")
        return parse_judge.record(engine, item, root, reason)
    if item.outcome != "ok" and stand_in:
        raise GoldensError(f"{item.case}: the reference refused this case; there are no ids to diverge from")
    got = answer(engine, item.request)
    served = _serve(engine, item.request, got)
    endpoint = engine_registry.capabilities(engine.name).stand_in or None
    if stand_in:
        if served is None or endpoint is None:
            raise GoldensError(f"{item.case}: {engine.name} has no stand-in endpoint beside a serving path")
        if _stand_in_finding(item.case, engine, got, served, engine.name) is None:
            raise GoldensError(f"{item.case}: {engine.name}'s {endpoint} agrees with its serving path; "
                               "nothing to record")
    else:
        endpoint = None
        serving = served.answer() if served is not None else None
        got = serving if serving is not None else got
    if isinstance(got, Refused) and item.outcome != "ok":
        raise GoldensError(f"{item.case}: {engine.name} refuses it as the reference does; nothing to record")
    if isinstance(got, Refused):
        message = stable_line(got)
        return ledger.write(root, item, engine.name, reason.strip(), [], [], None, refused=message,
                            engine_version=reported_version(engine), stand_in=endpoint, klass=klass, upstream=upstream)
    if isinstance(got, PromptCount):
        raise GoldensError(f"{item.case}: {engine.name} reports only a prompt token count; there are no ids to record")
    if list(got) == item.ids and not stand_in:
        raise GoldensError(f"{item.case}: {engine.name} matches the reference; nothing to record")
    return ledger.write(root, item, engine.name, reason.strip(), list(got), pieces_of(got),
                        Ids.of(got).prompt, engine_version=reported_version(engine), stand_in=endpoint,
                        klass=klass, upstream=upstream)


def record_cause(root: Path, name: str, edit: causes_.Edit, engine: str,
                 per_model: Sequence[tuple[str, Engine, Sequence[golden_file.Golden]]], reason: str,
                 replace_entries: bool = False, klass: str | None = None,
                 upstream: Sequence[str] = ()) -> tuple[Path, list[str], list[Path]]:
    """Record a reviewed cause: `edit` accepted on `engine` for these models, with `reason`,
    after replaying every golden the reference renders through the engine as `check` judges it.
    Returns the cause's path, the cases it explains (applying the edit to the golden's ids gives
    the engine's ids exactly) and the per-case ledger entries it makes redundant (removed with
    `replace_entries`). A cause no case shows is refused: nothing is written."""
    causes_.check_name(name)
    if not reason.strip():
        raise GoldensError("a reviewed cause needs a --reason that says why it is accepted")
    explained: list[str] = []
    redundant: list[Path] = []
    version = ""
    for model, engine_, goldens in per_model:
        version = version or reported_version(engine_)
        for item in goldens:
            if item.outcome != "ok":
                continue
            got = judged(engine_, item.request)
            if isinstance(got, (Refused, PromptCount)) or edit.apply(item.ids) != list(got):
                continue
            explained.append(item.case)
            entry = ledger.read(root, item.case, engine_.name)
            if entry is not None and entry.refused is None and entry.ids == list(got):
                redundant.append(entry.path)
    models = [model for model, _, _ in per_model]
    if not explained:
        raise GoldensError(f"no case of {', '.join(models)} on {engine} shows the edit {edit.describe()}; "
                           "nothing recorded")
    cause = causes_.Cause(name=name, edit=None, edits=(edit,), engines=[engine], models=models,
                          reason=reason.strip(), engine_version=version or None,
                          klass=klass or causes_.UNCLASSIFIED, upstream=tuple(upstream), cases=tuple(explained))
    if cause.klass == causes_.UNCLASSIFIED:
        cause = causes_.Cause(name=name, edit=edit, engines=[engine], models=models, reason=reason.strip(),
                              engine_version=version or None)
    path = causes_.write(root, cause)
    if replace_entries:
        for entry_path in redundant:
            entry_path.unlink()
    return path, explained, redundant
