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
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import files
from generator.config import parse_cases
from generator.engines import EngineError, Refused, Unreachable, reported_version
from generator.engines import parse as parse_api
from generator.errors import GoldensError, stable_line
from generator.goldens import golden_file
from generator.replay.judging import ledger

AXIS = "parse"


@dataclass
class Observed:
    """What an engine made of one parse golden: its whole parse (or refusal) and each streamed
    plan's assembled message and property violations."""

    whole: dict[str, Any] | None = None
    refused: str | None = None
    plans: dict[str, dict[str, Any]] = field(default_factory=dict)  # plan -> {"message", "violations", "steps"}
    order: list[str] = field(default_factory=list)
    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def signature(self) -> dict[str, Any]:
        """What a ledger entry records: the whole parse (or refusal) and, for each plan that differs
        from it or breaks a property, what it gave. Call ids are never in it."""
        if self.refused is not None:
            return {"refused": self.refused}
        plans = {}
        for name in self.order:
            result = self.plans[name]
            if result["violations"] or differences(self.whole or {}, result["message"]):
                plans[name] = {"message": result["message"], "violations": result["violations"]}
        return {"whole": self.whole, "plans": plans}


def _text(value: Any) -> str:
    return value or ""


def _json(text: str) -> str | None:
    """The canonical form of a JSON text (types kept), None when it is not JSON."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return None


def _same_arguments(a: str, b: str) -> bool:
    ja, jb = _json(a), _json(b)
    if ja is not None and jb is not None:
        return ja == jb
    return a == b


def differences(expected: dict[str, Any], got: dict[str, Any],
                words: tuple[str, str] = ("expected", "got")) -> list[str]:
    """Each place `got` parts from `expected`, in reading order, as `field: expected ... got ...`
    (`words` names the two sides: a stream is compared with the whole parse)."""
    a_, b_ = words
    out = []
    for key in ("reasoning_content", "content"):
        if _text(expected.get(key)) != _text(got.get(key)):
            out.append(f"{key}: {a_} {_shown(expected.get(key))}, {b_} {_shown(got.get(key))}")
    want, have = expected.get("tool_calls") or [], got.get("tool_calls") or []
    for i, (a, b) in enumerate(zip(want, have)):
        if a.get("name") != b.get("name"):
            out.append(f"tool_calls[{i}].name: {a_} {_shown(a.get('name'))}, {b_} {_shown(b.get('name'))}")
        if not _same_arguments(_text(a.get("arguments")), _text(b.get("arguments"))):
            out.append(f"tool_calls[{i}].arguments: {a_} {_shown(a.get('arguments'))}, "
                       f"{b_} {_shown(b.get('arguments'))}")
    if len(want) != len(have):
        out.append(f"tool_calls: {a_} {len(want)} call{'s' if len(want) != 1 else ''}, {b_} {len(have)}")
    if expected.get("finish_reason") != got.get("finish_reason"):
        out.append(f"finish_reason: {a_} {_shown(expected.get('finish_reason'))}, "
                   f"{b_} {_shown(got.get('finish_reason'))}")
    return out


STREAM_WORDS = ("the whole parse has", "the stream assembles")


def _shown(value: Any, limit: int = 80) -> str:
    if value is None:
        return "none"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def violations(deltas: Sequence[Sequence[dict[str, Any]]], expected: dict[str, Any],
               delimiters: Sequence[str]) -> list[str]:
    """The first delta of each kind that shows a delimiter the expected text does not hold, as
    `<field> delta holds '<delimiter>' (step N)`."""
    out = []
    for key in ("content", "reasoning_content"):
        allowed = _text(expected.get(key))
        for step, chunk in enumerate(deltas):
            shown = next((d for d in delimiters if any(d in _text(x.get(key)) for x in chunk) and d not in allowed),
                         None)
            if shown is not None:
                out.append(f"{key} delta holds {shown!r} (step {step})")
                break
    return out


def first_step(deltas: Sequence[Sequence[dict[str, Any]]], whole: dict[str, Any]) -> int:
    """The first step after which the message assembled so far is no longer on its way to the
    whole parse (a text that is not a prefix of the whole one, a call the whole parse lacks or
    names otherwise); the last step when only its end differs."""
    for step in range(len(deltas)):
        so_far = parse_api.assemble(deltas[:step + 1])
        for key in ("content", "reasoning_content"):
            if not _text(whole.get(key)).startswith(_text(so_far.get(key))):
                return step
        calls = whole.get("tool_calls") or []
        for i, call in enumerate(so_far["tool_calls"]):
            if i >= len(calls) or (call["name"] and call["name"] != calls[i]["name"]) \
                    or not _text(calls[i]["arguments"]).startswith(call["arguments"]):
                return step
    return max(len(deltas) - 1, 0)


def observe(engine: Any, item: golden_file.Golden, plans: Sequence[parse_cases.Plan] | None = None) -> Observed:
    """Run the whole parse and every streamed plan of the golden's output through the engine."""
    out = Observed()
    request, ids = item.request, list(item.ids)
    try:
        whole = engine.parse(request, ids, None)
    except Refused as refusal:
        out.refused = stable_line(refusal)
        return out
    out.whole = whole.assembled()
    expected = item.extra.get("expected") or {}
    delimiters = item.extra.get("delimiters") or []
    for plan in plans if plans is not None else parse_cases.plans(len(ids)):
        if not plan.streamed:
            continue
        try:
            parsed = engine.parse(request, ids, list(plan.sizes))
        except Refused as refusal:
            raise EngineError(f"{engine.name}: refused the stream of plan {plan.name} after parsing the whole "
                              f"output ({stable_line(refusal)})") from None
        deltas = parsed.deltas or []
        if len(deltas) != len(plan.sizes):
            raise EngineError(f"{engine.name}: plan {plan.name}: {len(deltas)} steps answered for "
                              f"{len(plan.sizes)} chunks")
        out.plans[plan.name] = {"message": parse_api.assemble(deltas),
                                "violations": violations(deltas, expected, delimiters),
                                "step": first_step(deltas, out.whole)}
        out.order.append(plan.name)
        out.sizes[plan.name] = plan.sizes
    return out


def problems(item: golden_file.Golden, observed: Observed) -> list[str]:
    """Everything wrong with the observed parse, the first the most telling: the whole parse's
    differences from the expected message, then each plan's (as the first step it went astray,
    with the output ids it had been given)."""
    if observed.refused is not None:
        return [f"refused: {observed.refused}"]
    expected = item.extra.get("expected") or {}
    out = [f"whole: {d}" for d in differences(expected, observed.whole or {})]
    for name in observed.order:
        result = observed.plans[name]
        diffs = differences(observed.whole or {}, result["message"], STREAM_WORDS)
        if not diffs and not result["violations"]:
            continue
        step = result["step"]
        sizes = observed.sizes[name]
        start = sum(sizes[:step])
        where = (f"step {step} (output ids {start}..{start + sizes[step] - 1})" if sizes else "")
        first = result["violations"][0] if result["violations"] else diffs[0]
        out.append(f"plan {name}: {first}{'; first astray at ' + where if diffs and where else ''}")
    return out


# ------------------------------------------------------------------ findings: what kind of difference

def _category(want: Any, have: Any) -> str:
    """How two texts differ, in a word: missing, extra, whitespace (equal once stripped), other."""
    a, b = _text(want), _text(have)
    if a and not b:
        return "missing"
    if b and not a:
        return "extra"
    return "whitespace" if a.strip() == b.strip() else "other"


def _kinds(want: dict[str, Any], have: dict[str, Any]) -> list[str]:
    """Each field where `have` parts from `want`, with the kind of difference; call positions
    are `*`, so one kind covers every call."""
    out = []
    for key in ("reasoning_content", "content"):
        if _text(want.get(key)) != _text(have.get(key)):
            out.append(f"{key}: {_category(want.get(key), have.get(key))}")
    a_calls, b_calls = want.get("tool_calls") or [], have.get("tool_calls") or []
    for a, b in zip(a_calls, b_calls):
        if a.get("name") != b.get("name"):
            out.append(f"tool_calls[*].name: {_category(a.get('name'), b.get('name'))}")
        if not _same_arguments(_text(a.get("arguments")), _text(b.get("arguments"))):
            kind = "not JSON" if _json(_text(b.get("arguments"))) is None else "other"
            out.append(f"tool_calls[*].arguments: {kind}")
    if len(a_calls) != len(b_calls):
        out.append(f"tool_calls: {'fewer' if len(b_calls) < len(a_calls) else 'more'}")
    if want.get("finish_reason") != have.get("finish_reason"):
        out.append(f"finish_reason: {want.get('finish_reason')} -> {have.get('finish_reason')}")
    return list(dict.fromkeys(out))


def plan_kinds(observed: Observed, name: str) -> list[str]:
    """The kinds of how one streamed plan parts from the whole parse (its differences, then the
    delimiters its deltas show), each once."""
    result = observed.plans[name]
    kinds = _kinds(observed.whole or {}, result["message"])
    kinds += [v.rsplit(" (step ", 1)[0] for v in result["violations"]]
    return list(dict.fromkeys(kinds))


def findings(item: golden_file.Golden, observed: Observed) -> list[str]:
    """The kinds of what is wrong with an engine's parse of a golden, the words a reviewed parse
    cause lists: `whole <field>: <kind>` against the expected message, `stream (every plan|some
    plans) <field>: <kind>` against the whole parse, `stream ... <field> delta holds <delimiter>`,
    `refused`."""
    if observed.refused is not None:
        import re

        said = observed.refused.partition(": ")[2] or observed.refused  # without the engine's name
        return [f"refused: {re.sub(r'[0-9]+', 'N', said)[:120]}"]
    out = [f"whole {kind}" for kind in _kinds(item.extra.get("expected") or {}, observed.whole or {})]
    counts: dict[str, int] = {}
    for name in observed.order:
        for kind in plan_kinds(observed, name):
            counts[kind] = counts.get(kind, 0) + 1
    for kind, n in counts.items():
        out.append(f"stream ({'every plan' if n == len(observed.order) else 'some plans'}) {kind}")
    return out


# ------------------------------------------------------------------ reviewed parse causes

CAUSES = "parse"  # goldens/causes/parse/<name>.json


@dataclass(frozen=True)
class Cause:
    """A reviewed behaviour of an engine's parser: every case of its engines and models whose
    findings are all among `findings` is known, with `reason`."""

    name: str
    engines: tuple[str, ...]
    models: tuple[str, ...]
    findings: tuple[str, ...]
    reason: str
    path: Path | None = None
    cases: tuple[str, ...] = ()  # case id patterns (fnmatch) it is limited to; () for every case
    klass: str | None = None  # engine-defect, policy or reference (replay/judging/causes.py CLASSES)
    explains: tuple[str, ...] = ()  # the cases it explained when it was recorded (for `goldens ledger`'s counts)
    upstream: tuple[str, ...] = ()  # an engine-defect's upstream issue links
    report: str | None = None  # the ready-to-file report beside it (`<name>.report.md`, defects.py)

    def applies(self, case: str) -> bool:
        import fnmatch

        return not self.cases or any(fnmatch.fnmatchcase(case, pattern) for pattern in self.cases)


def causes_folder(root: Path) -> Path:
    from generator.replay.judging import causes as render_causes

    return root / render_causes.FOLDER / CAUSES


def load_causes(root: Path) -> list[Cause]:
    """Every reviewed parse cause under the goldens folder (a bad one is one error line)."""
    from generator.json_reader import load_json

    folder = causes_folder(root)
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        data = load_json(files.read_bytes(path), str(path))
        try:
            cause = Cause(name=data["cause"], engines=tuple(data["engines"]), models=tuple(data["models"]),
                          findings=tuple(data["findings"]), reason=data["reason"], path=path,
                          cases=tuple(data.get("cases") or ()), klass=data.get("class"),
                          explains=tuple(data.get("explains") or ()), upstream=tuple(data.get("upstream") or ()),
                          report=data.get("report"))
        except (KeyError, TypeError):
            raise GoldensError(f"{path}: a parse cause has cause, engines, models, findings and reason") from None
        if cause.name != path.stem or not all(isinstance(x, str) and x for x in
                                              (*cause.engines, *cause.models, *cause.findings, *cause.cases,
                                               cause.reason)):
            raise GoldensError(f"{path}: `cause` must be the file's name, and every value a non-empty string")
        from generator.replay.judging.causes import report_name

        if cause.report is not None and cause.report != report_name(cause.name):
            raise GoldensError(f"{path}: `report` must be {report_name(cause.name)!r}, beside the cause")
        out.append(cause)
    return out


def named_cause(root: Path, name: str) -> Cause | None:
    return next((c for c in load_causes(root) if c.name == name), None)


def covering(root: Path, engine: str, model: str) -> list[Cause]:
    return [c for c in load_causes(root) if engine in c.engines and model in c.models]


def write_cause(root: Path, cause: Cause) -> Path:
    import json as json_

    from generator.replay.judging import causes as render_causes

    render_causes.check_name(cause.name)
    data = {"format": 1, "cause": cause.name, "engines": list(cause.engines), "models": list(cause.models),
            **({"cases": list(cause.cases)} if cause.cases else {}),
            "findings": list(cause.findings), "class": cause.klass, "reason": cause.reason,
            **({"upstream": list(cause.upstream)} if cause.upstream else {}),
            **({"report": cause.report} if cause.report else {}), "explains": list(cause.explains)}
    path = causes_folder(root) / f"{cause.name}.json"
    if path.is_file():  # a rewrite (an upstream link, a report) keeps the reviewed file's key order
        old = json_.loads(files.read_text(path))
        data = {**{k: data[k] for k in old if k in data and k != "explains"},
                **{k: v for k, v in data.items() if k not in old and k != "explains"}, "explains": data["explains"]}
    files.atomic_write(path, json_.dumps(data, indent=2, ensure_ascii=False) + "\n", within=root)
    return path


# ------------------------------------------------------------------ the ledger's parse entries

@dataclass
class Entry:
    case: str
    engine: str
    reason: str
    signature: dict[str, Any]
    path: Path


def read_entry(root: Path, case_id: str, engine: str) -> Entry | None:
    """The engine's reviewed parse entry for a case, if there is one."""
    path = ledger.entry_path(root, case_id, engine)
    if not path.exists():
        return None
    item = golden_file.read(path)
    reason = item.extra.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise GoldensError(f"{path}: a ledger entry needs a non-empty `reason`")
    if item.extra.get("engine") != engine:
        raise GoldensError(f"{path}: `engine` must be {engine!r}")
    signature = item.extra.get("parse")
    if not isinstance(signature, dict) or not ("refused" in signature or "whole" in signature):
        raise GoldensError(f"{path}: a parse ledger entry records the engine's parse under `parse`")
    return Entry(case=item.case, engine=engine, reason=reason, signature=signature, path=path)


def write_entry(root: Path, item: golden_file.Golden, engine: str, reason: str, observed: Observed,
                engine_version: str = "") -> Path:
    """Record the engine's parse of a golden as reviewed (the golden's bytes plus engine, reason
    and the parse)."""
    entry = golden_file.Golden(
        case=item.case, request=item.request, outcome=item.outcome, ids=list(item.ids), pieces=list(item.pieces),
        prompt=None, error=None, provenance=item.provenance,
        extra={"axis": AXIS, "engine": engine, "engine_version": engine_version or None, "reason": reason,
               "parse": observed.signature()},
    )
    path = ledger.entry_path(root, item.case, engine)
    files.atomic_write(path, golden_file.dumps(entry), within=root)
    return path


# ------------------------------------------------------------------ the verdict

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
