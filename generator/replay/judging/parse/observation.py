"""What an engine made of a parse golden: its whole parse and every streamed plan, observed, and
what is wrong with it in words.

`observe` asks the engine (the whole parse, then each plan of config/parse_cases.py); an Observed
holds the answers and the property violations of each plan, and its `signature` is what a
reviewed ledger entry records. `differences` and `problems` say where a parse parts from the
expected message, or a stream from the whole parse, in reading order (judge.py says what is
checked).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from generator.config import parse_cases
from generator.engines import EngineError, Refused
from generator.engines import parse as parse_api
from generator.errors import stable_line
from generator.goldens import golden_file

AXIS = "parse"  # an Outcome's and a ledger entry's axis: the output side


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


def text_of(value: Any) -> str:
    """A message's text, empty where it is absent (OpenAI's null): the two are the same."""
    return value or ""


def json_form(text: str) -> str | None:
    """The canonical form of a JSON text (types kept), None when it is not JSON."""
    try:
        return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return None


def same_arguments(a: str, b: str) -> bool:
    """Two calls' arguments are equal as JSON values (types kept), as text where either is not JSON."""
    ja, jb = json_form(a), json_form(b)
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
        if text_of(expected.get(key)) != text_of(got.get(key)):
            out.append(f"{key}: {a_} {_shown(expected.get(key))}, {b_} {_shown(got.get(key))}")
    want, have = expected.get("tool_calls") or [], got.get("tool_calls") or []
    for i, (a, b) in enumerate(zip(want, have)):
        if a.get("name") != b.get("name"):
            out.append(f"tool_calls[{i}].name: {a_} {_shown(a.get('name'))}, {b_} {_shown(b.get('name'))}")
        if not same_arguments(text_of(a.get("arguments")), text_of(b.get("arguments"))):
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
        allowed = text_of(expected.get(key))
        for step, chunk in enumerate(deltas):
            shown = next((d for d in delimiters if any(d in text_of(x.get(key)) for x in chunk) and d not in allowed),
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
            if not text_of(whole.get(key)).startswith(text_of(so_far.get(key))):
                return step
        calls = whole.get("tool_calls") or []
        for i, call in enumerate(so_far["tool_calls"]):
            if i >= len(calls) or (call["name"] and call["name"] != calls[i]["name"]) \
                    or not text_of(calls[i]["arguments"]).startswith(call["arguments"]):
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
