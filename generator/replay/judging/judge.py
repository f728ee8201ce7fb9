"""Replay: send goldens through an engine and judge each answer. The one judge.

`judge` replays one golden through one engine, `replay` every golden of a run, `jobs` at a time:
each answer is asked (answers.py) and judged by THE verdict (verdict.py), which the pytest
snapshots (replay/judging/snapshot.py) call too, so the CI gate and the test suite cannot disagree.
A stand-in's disagreement with serving is found and judged in stand_in.py; recording a reviewed
divergence (`goldens ledger`) is recording.py.

An Outcome is one of: `match` (the golden's ids), `both-refuse` (the reference and the engine
both refused: it passes, but nothing was rendered, so it is never counted as a match), `known`
(exactly the reviewed ledger entry, or the golden's ids with a reviewed cause's edit made:
replay/judging/causes.py), `drift` (anything else, with the report and the first edit between the ids),
or `error` (the engine could not answer, so nothing was judged); and for an engine that reports
only how many prompt tokens it evaluated, `count` (the golden's length; the ids themselves were
never seen). An HTTP 4xx/5xx about one request is a refusal (generator/http.py's one rule), so
it is judged (verdict.py) like a template's raise; only an engine that cannot answer is an error. Every outcome
judged from a count has level "count", so reports can mark it: equal lengths are not called a
match. Requests go out concurrently from a thread pool.

Where an engine is read through a stand-in endpoint (llama-server's /apply-template +
/tokenize, vLLM's /tokenize), `confirm` also sends the case down the serving path: vLLM's
served prompt ids are what is judged, llama-server's served counts must equal the stand-in's.
A stand-in that disagrees with serving is a finding of its own, never the engine's verdict.

The verdict is data: `status` decides the exit code, `kind` (a key of outcome.py's KIND_STATUS) says what happened in a
word reports look up, `divergence` where; reports parse none of the prose in `detail`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from generator import http
from generator.config.models import ReviewedDispute
from generator.engines import Engine, EngineError, Unreachable, reported_version
from generator.goldens import golden_file
from generator.replay.judging import causes as causes_, disputes, ledger, stand_in as stand_ins
from generator.replay.judging.answers import answer, serve, stand_in_name
from generator.replay.judging.outcome import Outcome
from generator.replay.judging.verdict import verdict


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
        from generator.replay.judging.parse import judge as parse_judge

        return parse_judge.judge(engine, item, root, label)
    entry = ledger.read(root, item.case, engine.name)
    covering = causes_.covering(root, engine.name, item.case.partition("/")[0])
    try:
        got = answer(engine, item.request)
        served = serve(engine, item.request, got) if confirm else None
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
    finding = stand_ins.finding(item.case, engine, got, served, label)
    outcome.finding = stand_ins.judge_finding(item, ledger.read_stand_in(root, item.case, engine.name), label,
                                              stand_in_name(engine), got, finding, decode)
    return outcome


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

