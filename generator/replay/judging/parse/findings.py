"""The kinds of what is wrong with an engine's parse: the words a reviewed parse cause lists.

A finding names a field and the kind of its difference (missing, extra, whitespace, other, not
JSON, a delimiter shown), never the text itself, so one cause covers every case an engine's
parser gets wrong the same way.
"""

from __future__ import annotations

from typing import Any

from generator.goldens import golden_file
from generator.replay.judging.parse.observation import Observed, json_form, same_arguments, text_of


def _category(want: Any, have: Any) -> str:
    """How two texts differ, in a word: missing, extra, whitespace (equal once stripped), other."""
    a, b = text_of(want), text_of(have)
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
        if text_of(want.get(key)) != text_of(have.get(key)):
            out.append(f"{key}: {_category(want.get(key), have.get(key))}")
    a_calls, b_calls = want.get("tool_calls") or [], have.get("tool_calls") or []
    for a, b in zip(a_calls, b_calls):
        if a.get("name") != b.get("name"):
            out.append(f"tool_calls[*].name: {_category(a.get('name'), b.get('name'))}")
        if not same_arguments(text_of(a.get("arguments")), text_of(b.get("arguments"))):
            kind = "not JSON" if json_form(text_of(b.get("arguments"))) is None else "other"
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
