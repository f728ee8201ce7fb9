"""`goldens check`: replay the matrix's goldens through chosen engines and collect outcomes.

Applicable means the engine is listed for the model in models.yaml. Models are replayed one at
a time and a model's managed servers are stopped before the next one starts, so a full matrix
fits the machine; a server given by URL is the user's and is left alone.

Nothing judged is never green: a server that cannot start makes its cases errors (the other
engines are still judged and the reports still written), an engine that refuses every case of
a model is an error rather than a row of refusals, and cases left when the run's deadline
passes are errors that say so. A reviewed cause covering an engine and model that no case of
the run explained is stale and fails the gate, as a stale ledger entry does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from generator import http, reference
from generator.config import engine_registry, engine_spec
from generator.config.cases import all_cases, is_parse_case, replays
from generator.config.engine_spec import EngineSpec
from generator.config.models import Config, ModelSpec
from generator.engines import Engine
from generator.engines.pool import EnginePool, check_available
from generator.engines.remote import Connection
from generator.errors import GoldensError, one_line
from generator.replay.judging import causes
from generator.replay.judging.judge import replay
from generator.replay.judging.outcome import Outcome, load_goldens
from generator.replay.reporting.report import surrogate_note
from generator.replay.reporting.results import Group, Plan, Results, fingerprint
from generator.sources.source import Source, resolve

NO_CONFIRM = ("--no-confirm: stand-in endpoints (llama-server /apply-template + /tokenize, vLLM /tokenize) "
              "were not confirmed on the serving path")


def plan(config: Config, engines: tuple[str, ...], models: tuple[str, ...],
         urls: dict[str, str] | None = None) -> list[tuple[str, list[EngineSpec]]]:
    """(model, engines to replay it through) for the selection; unknown names are errors.
    `llama-server@11000 llama-server@11434` replays a model listing llama-server through both;
    a version for an engine whose server a --url names is a contradiction. An engine that serves
    any model (openai, ollama, a plugin) also applies to each model named explicitly, whether or
    not models.yaml lists it there."""
    specs = [engine_spec.parse(text) for text in engines]
    for spec in specs:
        if spec.version is not None and spec.name in (urls or {}):
            raise GoldensError(f"--engine {spec.label}: a --url for {spec.name} already names the server")
    anywhere = [spec for spec in specs if engine_registry.lookup(spec.name).any_model]
    out = []
    for model in config.select(models):
        if specs:
            chosen = [spec for spec in specs if spec.name in model.engines]
        else:
            chosen = [EngineSpec(name) for name in model.engines]
        chosen += [spec for spec in anywhere if models and spec not in chosen]
        if chosen:
            out.append((model.name, chosen))
    if not out:
        names = ", ".join(spec.name for spec in anywhere)
        hint = f" ({names} serves any model: name it with --model)" if anywhere else ""
        raise GoldensError(f"nothing to check: no selected model lists the selected engine(s) in models.yaml{hint}")
    return out


AXES = ("render", "parse")


def groups(config: Config, work: list[tuple[str, list[EngineSpec]]],
           axis: str = "both", urls: dict[str, str] | None = None) -> list[tuple[str, EngineSpec, list[str]]]:
    """The plan's (model, engine, case ids replayed) groups, in run order: what a shard takes
    whole; `axis` "render" or "parse" keeps that axis's cases only. An engine as chosen that has
    no parse path (transformers@4.57.6, llama-server given --url: engine_registry.parses_as) is
    asked no parse case, as an engine with none is not."""
    out = []
    for model_name, specs in work:
        model = config.models[model_name]
        cases = [c for c in all_cases(model) if axis in ("both", c.axis)]
        for spec in specs:
            parses = engine_registry.parses_as(spec, urls or {})
            out.append((model_name, spec, [c.id for c in cases if replays(c, spec.name, model)
                                           and (parses or not is_parse_case(c.id))]))
    return out


def selection(config: Config, work: list[tuple[str, list[EngineSpec]]], axis: str = "both",
              urls: dict[str, str] | None = None) -> Plan:
    """The plan as results name it: its group and replay counts and fingerprint."""
    parts = groups(config, work, axis, urls)
    return Plan(groups=len(parts), replays=sum(len(c) for _, _, c in parts),
                fingerprint=fingerprint([(m, spec.label, c) for m, spec, c in parts]))


def refuse_unavailable(config: Config, parts, chosen, urls: dict[str, str] | None) -> None:
    """An engine version that was never published (or cannot run here) in one line, before
    anything is downloaded, resolved or started for the run."""
    for i in chosen:
        spec = parts[i][1]
        if spec.name not in (urls or {}):
            check_available(spec, config.engine_versions)


def run(config: Config, root: Path, engines: tuple[str, ...] = (), models: tuple[str, ...] = (),
        urls: dict[str, str] | None = None, jobs: int = 8,
        advance: Callable[[str], None] | None = None,
        note: Callable[[str], None] | None = None,
        confirm: bool = True, timeout: float | None = None,
        request_timeout: float | None = None,
        connection: Connection | None = None, only: set[int] | None = None,
        shard: tuple[int, int] | None = None, pool: EnginePool | None = None, axis: str = "both",
        transport: http.Transport | None = None) -> Results:
    """Every (model, engine) group of the plan (those indexed in `only`, when given), judged.
    `confirm` sends each case down the serving path of engines read through a stand-in;
    `timeout` bounds the whole run and `request_timeout` each request to an engine, in seconds.
    `pool` lends the run servers its owner keeps (a test session's): the run then stops, after
    each model, only the vLLM servers (about 3.5 GB each) it started itself, never the owner's.
    `transport` carries every request to an engine (a HandlerTransport answers them in this
    process); the run's bounds are put on it."""
    work = plan(config, engines, models, urls)
    parts = groups(config, work, axis, urls)
    chosen = [i for i in range(len(parts)) if only is None or i in only]
    refuse_unavailable(config, parts, chosen, urls)
    results = Results(plan=selection(config, work, axis, urls), groups=[], shard=shard,
                      notes=[] if confirm else [NO_CONFIRM])
    started = time.monotonic()
    # the run's one deadline: the transport carries it to every request and, through each
    # engine's EngineContext.until, to every in-process render; halt() reads it between cases
    transport = (transport or http.DEFAULT).bounded_by(run=timeout, request=request_timeout)

    def halt() -> str | None:
        if transport.until is not None and time.monotonic() >= transport.until:
            return f"not judged: the run's --timeout of {timeout:g}s was reached"
        return None

    by_model: dict[str, list[int]] = {}
    for i in chosen:
        by_model.setdefault(parts[i][0], []).append(i)
    lent = pool is not None
    owners = pool.running() if lent else frozenset()
    with (contextlib.nullcontext(pool) if lent else
          EnginePool(config.date, urls, on_start=note, connection=connection,
                     versions=config.engine_versions, transport=transport)) as pool:
        if not lent:  # a first run: builds and venvs start now, beside the cases that need none
            preparing = pool.prepare(dict.fromkeys(parts[i][1] for i in chosen))
            if preparing and note is not None:
                note(f"making ready in the background: {', '.join(preparing)}")
        for model_name, indices in by_model.items():
            model = config.models[model_name]
            source = resolve(model, config, transport.until)  # compiling the template is a render too
            if model.surrogate:  # every report marks its lines (replay/reporting/report.py)
                results.notes.append(surrogate_note(model.name, model.tokenizer.family or model.name))
            case_ids = list(dict.fromkeys(c for i in indices for c in parts[i][2]))
            goldens = dict(zip(case_ids, load_goldens(root, case_ids)))
            tokenizer = reference.load_tokenizer(source.tokenizer_dir)
            decode = lambda ids: reference.pieces(tokenizer, list(ids))  # noqa: E731
            for i in indices:
                _, spec, cases = parts[i]
                group_started = time.monotonic()
                group = Group(i, model_name, spec.label)
                chosen_goldens = [goldens[c] for c in cases]
                engine, reason = None, halt()
                if reason is None:
                    engine, reason = _open(pool, spec, model, source, transport)
                if reason is not None:
                    for item in chosen_goldens:
                        group.outcomes.append(Outcome(item.case, spec.label, "error", reason))
                        if advance is not None:
                            advance(item.case)
                else:
                    replayed = replay(engine, chosen_goldens, root, jobs=jobs, decode=decode, advance=advance,
                                      confirm=confirm, halt=halt, label=spec.label, reviews=model.disputes)
                    group.outcomes = all_refused(model_name, spec.label, replayed)
                    group.outcomes += stale_causes(root, model_name, spec.name, spec.label, group.outcomes)
                group.seconds = time.monotonic() - group_started
                results.groups.append(group)
            first = next(i for i, part in enumerate(parts) if part[0] == model_name)
            render_ids = list(dict.fromkeys(c for part in parts if part[0] == model_name for c in part[2]
                                            if not is_parse_case(c)))
            if first in indices and results.groups and render_ids:  # one shard speaks for a model's goldens
                found, note = invariant_outcomes(root, model, render_ids)
                found += dispute_outcomes(root, model, render_ids)
                results.groups[-len(indices)].outcomes += found
                results.notes += note
            if lent:  # a shared pool keeps the light servers for the next model's cases
                for kind in engine_registry.one_model_at_a_time():
                    pool.release(model_name, kind, keep=owners)
            else:
                pool.release(model_name)
    results.elapsed = time.monotonic() - started
    return results


def _open(pool: EnginePool, spec: EngineSpec, model: ModelSpec, source: Source,
          transport: http.Transport) -> tuple[Engine | None, str | None]:
    """The engine, or in one line why it is unavailable: a server that cannot start costs its
    own cases, not the run."""
    name = spec.label
    try:
        return pool.engine(spec, model, source, transport), None
    except Exception as error:
        text = str(error) if isinstance(error, GoldensError) else f"internal error: {type(error).__name__}: {error}"
        return None, f"{name} unavailable for {model.name}: {one_line(text)}"


def all_refused(model: str, engine: str, outcomes: list[Outcome]) -> list[Outcome]:
    """An engine that refused every case of a model judged nothing (a server answering 400 to
    everything, a template that raises for every request): each case becomes an error."""
    verdicts = [o for o in outcomes if o.engine == engine and o.stand_in is None]
    if not verdicts or not all(o.refused for o in verdicts):
        return outcomes
    first = next((o for o in verdicts if o.status != "match"), verdicts[0]).detail
    reason = (f"{engine} refused every case of {model} ({len(verdicts)} of {len(verdicts)}), so nothing "
              f"was judged; the first: {first}")
    # its stand-in findings go too: a stand-in and a serving path that both refuse judged nothing
    return [Outcome(o.case, o.engine, "error", reason, version=o.version) if o.stand_in is None else o
            for o in outcomes if o.stand_in is None or o.engine != engine]


INVARIANTS = "invariants"  # the column an unreviewed invariant finding of the reference shows in


def invariant_outcomes(root: Path, model: ModelSpec, case_ids: list[str]) -> tuple[list[Outcome], list[str]]:
    """The invariant findings the model's goldens carry (generator/analysis/invariants.py): a
    note for every report, and a failing outcome for each finding models.yaml has not reviewed
    and each reviewed entry no finding matches any more; reviewed findings pass as known."""
    from generator.analysis import invariants
    found = {case: invariants.findings_of(item.extra)
             for case, item in zip(case_ids, load_goldens(root, case_ids)) if item.outcome == "ok"}
    judged = invariants.review(found, {model.name: model.invariants})
    outcomes = [Outcome(case, INVARIANTS, "drift", f"invariant finding not reviewed in models.yaml: "
                        f"{invariants.text(finding)}; `goldens regenerate` prints the review to paste under "
                        f"models.{model.name}.invariants ({invariants.docs_url()})", kind="invariant")
                for case, finding in judged.unreviewed]
    outcomes += [Outcome(case_ids[0], INVARIANTS, "drift", f"stale models.yaml entry: models.{model.name}.invariants "
                         f"finding {entry.finding!r} matches no finding any more", kind="invariant")
                 for _, entry in judged.stale]
    notes = []
    if judged.known or judged.unreviewed or judged.stale:
        n = len(judged.cases)
        notes.append(f"invariant findings of the reference ({model.name}): {n} golden{'s' if n != 1 else ''}, "
                     f"{len(judged.known)} reviewed as known, {len(judged.unreviewed)} not reviewed, "
                     f"{len(judged.stale)} stale entries ({invariants.docs_url()})")
    return outcomes, notes


def dispute_outcomes(root: Path, model: ModelSpec, case_ids: list[str]) -> list[Outcome]:
    """A failing outcome for each reviewed dispute (models.yaml references.disputes) that covers
    no disputed golden of the model any more: the references agree there now, or the case is
    gone (replay/judging/disputes.py)."""
    from generator.replay.judging import disputes

    if not model.disputes:
        return []
    stale = disputes.stale(model.name, case_ids, load_goldens(root, case_ids), model.disputes)
    return [Outcome(case, disputes.COLUMN, "drift", f"stale models.yaml entry: models.{model.name}.references."
                    f"disputes entry for {', '.join(review.cases)} (right: {review.right}) covers no disputed "
                    "case any more; remove it", kind=disputes.STALE) for case, review in stale]


def stale_causes(root: Path, model: str, engine: str, label: str, outcomes: list[Outcome]) -> list[Outcome]:
    """A `cause-stale` outcome for each reviewed cause covering this engine and model that no
    case of the group explained (it lists no case: its edit is no longer seen, perhaps fixed
    upstream). Only a group judged whole says so: one with an error or a disputed case (judged
    against no engine) may hide the case; and only
    for the axis it judged (a parse cause by parse cases, a render cause by render cases)."""
    verdicts = [o for o in outcomes if o.stand_in is None]
    if not verdicts or any(o.status in ("error", "disputed") for o in verdicts):  # a case not judged may hide it
        return []
    shown = {name for o in verdicts if o.cause is not None for name in o.cause.split(", ")}
    out = []
    if any(o.axis == "parse" for o in verdicts):
        from generator.replay.judging.parse import causes as parse_causes

        for cause in parse_causes.covering(root, engine, model):
            if cause.name not in shown:
                out.append(Outcome(
                    f"{model}/{causes.FOLDER}:{cause.name}", label, "drift",
                    f"the reviewed parse cause {cause.name} covers {engine} on {model}, but none of its "
                    f"{len(verdicts)} checked cases shows its findings any more; if {engine} was fixed, remove "
                    f"{cause.path} (was: {cause.reason})", kind="cause-stale", cause=cause.name,
                    version=verdicts[0].version, axis="parse"))
    if not any(o.axis != "parse" for o in verdicts):  # no render case judged (`--axis parse`): none shown, none stale
        return out
    for cause in causes.covering(root, engine, model):
        if cause.name not in shown and not cause.builtin:  # goldens' own apply to any model: none stale
            out.append(Outcome(
                f"{model}/{causes.FOLDER}:{cause.name}", label, "drift",
                f"the reviewed cause {cause.name} ({cause.describe()}) covers {engine} on {model}, but "
                f"none of its {len(verdicts)} checked cases shows that edit any more; if {engine} was "
                f"fixed, remove {causes.path_of(root, cause.name)} (was: {cause.reason})",
                kind="cause-stale", cause=cause.name, version=verdicts[0].version))
    return out
