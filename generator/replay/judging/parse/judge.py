"""The judge of the output side: an engine's parse of a golden's output ids, whole and streamed in
every chunk plan, against the message the golden expects.

What is checked, for every parse case and engine:
- the whole (non-streamed) parse gives the expected message: content, reasoning, each call's name
  and arguments (equal as JSON values, types kept: `1` is not `true`; text where either is not
  JSON), and the finish reason. Content and reasoning that are empty or absent are the same
  (OpenAI's null); call ids are never compared (random in every engine);
- every streamed plan (config/parse_cases.py `plans`) assembles, by OpenAI's accumulation rule,
  to the whole parse: no delta lost or repeated, nothing in one mode the other lacks;
- no content or reasoning delta of any plan shows a delimiter (the text of a special token of the
  output, as the golden lists them) that the expected text does not hold.

The outcome is one per (case, engine): `match` when all of it holds; otherwise the first place it
fails (the whole parse's first differing field, or the first plan that differs with the step and
the output ids it had been given). A reviewed parse ledger entry (`<model>/parse/<stem>.<engine>.json`)
records the engine's whole parse and each plan that differs from it (its `parse` key): an engine
that still answers exactly that is `known`; one that moves, or that now matches, fails the gate
as a moved or stale entry does on the render side.

The parts: observation.py asks the engine and says what is wrong in words, findings.py the kinds
of it a reviewed cause lists, causes.py the reviewed parse causes on disk, entries.py the ledger's
parse entries; this module joins them: the verdict, `judge` and what `goldens ledger` records.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from generator.engines import EngineError, Unreachable, reported_version
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging.parse.causes import Cause, covering, write_cause
from generator.replay.judging.parse.entries import Entry, read_entry, write_entry
from generator.replay.judging.parse.findings import findings
from generator.replay.judging.parse.observation import AXIS, Observed, observe, problems


def verdict(item: golden_file.Golden, entry: Entry | None, label: str, observed: Observed,
            causes: Sequence[Cause] = ()):
    """THE judgement of an engine's parse against a parse golden, its reviewed entry (the case's
    own, first) and the reviewed parse causes covering this engine and model."""
    from generator.replay.judging.outcome import Outcome

    found = problems(item, observed)
    if entry is not None:
        if observed.signature() == entry.signature:
            return Outcome(item.case, label, "known", entry.reason, reason=entry.reason,
                           refused=observed.refused is not None, axis=AXIS)
        if not found:
            return Outcome(item.case, label, "drift", f"{label} now parses it as expected; the ledger entry "
                           f"{entry.path.name} is stale (was: {entry.reason})", kind="ledger-fixed", axis=AXIS)
        return Outcome(item.case, label, "drift", f"moved from its ledger entry: {found[0]}",
                       kind="ledger-moved", refused=observed.refused is not None, axis=AXIS)
    if not found:
        return Outcome(item.case, label, "match", axis=AXIS)
    kinds = findings(item, observed)
    used = [c for c in causes if c.applies(item.case) and set(c.findings) & set(kinds)]
    unexplained = [k for k in kinds if not any(k in c.findings for c in used)]
    if kinds and not unexplained:
        names = ", ".join(c.name for c in used)
        reasons = " / ".join(c.reason for c in used)
        return Outcome(item.case, label, "known", f"cause {names}: {reasons}", reason=reasons,
                       refused=observed.refused is not None, cause=names, axis=AXIS, klass=_klass(used))
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return Outcome(item.case, label, "drift", f"{found[0]}{more}; findings not reviewed: {'; '.join(unexplained)}",
                   refused=observed.refused is not None, axis=AXIS, edit={"findings": unexplained})


def _klass(used: Sequence[Cause]) -> str | None:
    """A case several causes explain takes the first of their classes in causes.CLASSES' order
    (an engine defect before policy before the reference's error), so a gate on a class sees
    every case that class touches."""
    from generator.replay.judging.causes import CLASSES

    order = list(CLASSES)
    classes = sorted((c.klass for c in used if c.klass in order), key=order.index)
    return classes[0] if classes else used[0].klass


def judge(engine: Any, item: golden_file.Golden, root: Path, label: str | None = None):
    """Replay one parse golden through one engine: every plan, judged once."""
    from generator.replay.judging.outcome import Outcome

    label = label or engine.name
    if item.outcome != "ok":  # the reference made no output: nothing to parse (regenerate keeps none)
        return Outcome(item.case, label, "error", f"the golden has no output: {item.error}", axis=AXIS)
    if not hasattr(engine, "parse"):
        return Outcome(item.case, label, "error", f"{label} has no parse path", axis=AXIS)
    entry = read_entry(root, item.case, engine.name)
    reviewed = covering(root, engine.name, item.model)
    try:
        observed = observe(engine, item)
    except EngineError as error:
        return Outcome(item.case, label, "error", str(error), unreachable=isinstance(error, Unreachable), axis=AXIS)
    except Exception as error:  # a bug (ours or an engine library's): this case is not judged
        return Outcome(item.case, label, "error", f"{label}: internal error: {type(error).__name__}: {error}",
                       axis=AXIS)
    return verdict(item, entry, label, observed, reviewed)


def record(engine: Any, item: golden_file.Golden, root: Path, reason: str) -> Path:
    """`goldens ledger` for a parse case: record the engine's parse as reviewed (refused where
    the engine parses it as expected in every plan: nothing to record)."""
    if not reason.strip():
        raise GoldensError("a reviewed divergence needs a --reason that says why it is accepted")
    observed = observe(engine, item)
    if not problems(item, observed):
        raise GoldensError(f"{item.case}: {engine.name} parses it as expected in every plan; nothing to record")
    return write_entry(root, item, engine.name, reason.strip(), observed, reported_version(engine))


def record_cause(root: Path, config, pool, name: str, kinds: Sequence[str], engine: str,
                 model_names: Sequence[str], reason: str, cases: Sequence[str] = (),
                 klass: str | None = None, upstream: Sequence[str] = ()) -> tuple[Path, list[str]]:
    """`goldens ledger --cause NAME --finding ... [--case PATTERN]`: record a parse cause after
    replaying every parse case of the models (those `cases` patterns name) through the engine;
    refused (nothing written) unless some case's findings are all among `kinds`, and naming a
    finding no case shows."""
    scope = Cause(name, (), (), (), "", cases=tuple(cases))
    from generator.config.cases import parse_cases_of
    from generator.replay.judging.outcome import load_goldens
    from generator.sources.source import resolve

    if not reason.strip():
        raise GoldensError("a reviewed cause needs a --reason that says why it is accepted")
    explained, seen = [], set()
    for model_name in model_names:
        model = config.models[model_name]
        engine_ = pool.engine(engine, model, resolve(model, config))
        for item in load_goldens(root, [c.id for c in parse_cases_of(model) if scope.applies(c.id)]):
            if item.outcome != "ok":
                continue
            found = findings(item, observe(engine_, item))
            seen.update(found)
            if found and set(found) <= set(kinds):
                explained.append(item.case)
    unseen = [k for k in kinds if k not in seen]
    if unseen:
        raise GoldensError(f"no parse case of {', '.join(model_names)} on {engine} shows {unseen[0]!r}; nothing recorded")
    if not explained:
        raise GoldensError(f"no parse case of {', '.join(model_names)} on {engine} has only these findings; "
                           "nothing recorded")
    cause = Cause(name=name, engines=(engine.partition("@")[0],), models=tuple(model_names), findings=tuple(kinds),
                  reason=" ".join(reason.split()), cases=tuple(cases), klass=klass, explains=tuple(explained),
                  upstream=tuple(upstream))
    return write_cause(root, cause), explained
