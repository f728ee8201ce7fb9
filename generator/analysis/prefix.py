"""Prefix stability: every request of a conversation must start with the request before it.

A chat client sends the whole conversation again after every user turn or tool result, and an
engine's prefix cache reuses the computed state of as many leading tokens as the new request
shares with one it has seen. A request that rewrites an early token of the one before it makes
the engine recompute everything after that token; nothing fails, the only symptom is latency.

The check works on any engine's ids (the Engine protocol) and on any sequence of requests:
`requests_of` derives them from one recorded conversation (a request at the end of every run of
user/tool messages; a system message alone is never a request, an assistant turn is the reply),
and a client's own log of requests can be checked as sent. A break inside a declared tail at the
end of the earlier request (models.yaml `prefix_tails`, per model and variant, with its reason)
is by design and reported as declared; any other break is a finding, with what the client
changed when it changed something (diagnosis.py).

Beside this module: busters.py (client behaviours that break the prefix, each with its fix),
prefix_report.py (the text `goldens prefix` prints), prefix_command.py (that command's run).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from generator.analysis.diagnosis import diagnose
from generator.config.models import ModelSpec, PrefixTail
from generator.config.request import validate_request
from generator.engines import (
    Decode,
    Engine,
    Refused,
    Request,
    first_divergence,
    pieces_of,
)
from generator.errors import GoldensError
from generator.json_reader import load_json

CONTEXT = 5  # tokens shown on each side of a break
SHARED = 3  # shared tokens shown before it


# ------------------------------------------------------------------------------ requests


def request_points(messages: Sequence[dict]) -> list[int]:
    """Message counts at which a client sends a request: the end of every run of user or tool
    messages (parallel tool results are sent together, once)."""
    points = []
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "tool"):
            continue
        following = messages[i + 1]["role"] if i + 1 < len(messages) else None
        if following not in ("user", "tool"):
            points.append(i + 1)
    return points


MAX_REQUESTS = 16  # request points a golden's prefix analysis renders, at most (issue 44)


def sampled(points: Sequence[int], at_most: int = MAX_REQUESTS) -> list[int]:
    """At most `at_most` of `points`, evenly spread, the first and the last always among them:
    every request renders the whole conversation up to it, so all of a 10,000-message
    conversation's 5,000 requests took about an hour (quadratic); this many cost at most that
    many renders of the whole. A break between two requests kept still shows (a request that
    does not start with an earlier one breaks with some request between them)."""
    points = list(points)
    if len(points) <= at_most:
        return points
    step = (len(points) - 1) / (at_most - 1)
    return sorted({points[round(i * step)] for i in range(at_most)})


def requests_of(conversation: Request, at_most: int | None = None) -> list[Request]:
    """The requests a client sends over a recorded conversation: the same body (tools, kwargs)
    with the messages up to each request point, each asking for the next reply (with
    `at_most`, only that many of them: `sampled`)."""
    requests = []
    points = request_points(conversation["messages"])
    for count in (points if at_most is None else sampled(points, at_most)):
        request = copy.deepcopy({**conversation, "messages": conversation["messages"][:count]})
        request["add_generation_prompt"] = True
        request["continue_final_message"] = False
        requests.append(request)
    return requests


def is_multi_request(request: Request) -> bool:
    """Whether a golden's request stands for a conversation of two or more requests."""
    return (not request.get("continue_final_message")
            and request.get("add_generation_prompt", True)
            and len(request_points(request.get("messages") or [])) >= 2)


def variant_of(model: ModelSpec, kwargs: dict[str, Any]) -> str | None:
    """The variant whose template kwargs these are ("" = default), or None for no variant."""
    for variant, variant_kwargs in model.variants.items():
        if {**model.kwargs, **variant_kwargs} == kwargs:
            return variant
    return None


def tail_for(model: ModelSpec, kwargs: dict[str, Any]) -> PrefixTail | None:
    """The tail declared for the variant whose template kwargs these are (None: no tail)."""
    variant = variant_of(model, kwargs)
    return None if variant is None else model.prefix_tails.get(variant)


def multi_turn_shapes(model: ModelSpec) -> list[str]:
    """The model's shapes that stand for two or more requests."""
    return [s for s in model.shapes if is_multi_request(model.request(s, {}))]


def load_conversation(text: str | bytes, where: str) -> list[Request]:
    """A conversation file: one chat body holding the whole recorded conversation (requests are
    derived at every request point), or a JSON list of chat bodies, the requests as a client
    sent them, in order (so a client's own changes between requests are checked too)."""
    data = load_json(text, where)
    if isinstance(data, list):
        if len(data) < 2:
            raise GoldensError(f"{where}: a list of requests needs at least two")
        return [validate_request(body, f"{where}[{i}]") for i, body in enumerate(data)]
    body = validate_request(data, where)
    requests = requests_of(body)
    if len(requests) < 2:
        raise GoldensError(
            f"{where}: the conversation has {len(requests)} request point(s); a prefix check needs "
            "two or more (a request after every user turn or tool result)"
        )
    return requests


# ------------------------------------------------------------------------------ breaks


@dataclass
class Sent:
    """One request as the engine saw it: its message count and ids, or the engine's refusal."""

    messages: int
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    refused: str | None = None

    @property
    def sha256(self) -> str:
        """sha256 of the ids written as comma-separated decimals, first 16 hex digits."""
        return hashlib.sha256(",".join(map(str, self.ids)).encode()).hexdigest()[:16]


@dataclass
class Break:
    """A later request that does not start with the earlier one."""

    earlier: int  # messages in the earlier request
    later: int  # messages in the later request
    position: int  # first token index where the later request differs
    earlier_len: int
    later_len: int
    declared: bool  # inside the declared tail at the end of the earlier request
    shared: list[str]  # pieces just before the break, in both
    earlier_pieces: list[str]  # from the break on, as the earlier request had them
    later_pieces: list[str]  # from the break on, as the later request has them
    hint: str | None = None  # what the client changed, and what to do instead

    def summary(self) -> str:
        return f"break at token {self.position} ({self.earlier} -> {self.later} messages)"

    def record(self) -> dict[str, Any]:
        """The golden form: compact, and one line per field in a diff."""
        return {
            "at": self.position,
            "messages": f"{self.earlier} -> {self.later}",
            "declared": self.declared,
            "shared": "".join(self.shared),
            "earlier": "".join(self.earlier_pieces),
            "later": "".join(self.later_pieces),
        }


def find_breaks(sent: Sequence[Sent], tail: int = 0) -> list[Break]:
    """Every consecutive pair of answered requests where the earlier is not a token prefix of
    the later; `declared` when the break lies in the last `tail` tokens of the earlier one."""
    answered = [s for s in sent if s.refused is None]
    breaks = []
    for a, b in zip(answered, answered[1:]):
        position = first_divergence(a.ids, b.ids[: len(a.ids)])
        if position is None:
            continue
        breaks.append(Break(
            earlier=a.messages, later=b.messages, position=position,
            earlier_len=len(a.ids), later_len=len(b.ids),
            declared=position >= len(a.ids) - tail,
            shared=a.pieces[max(0, position - SHARED):position],
            earlier_pieces=a.pieces[position:position + CONTEXT],
            later_pieces=b.pieces[position:position + CONTEXT],
        ))
    return breaks


@dataclass
class Result:
    """One conversation through one engine: every request sent and every break found."""

    label: str
    engine: str
    sent: list[Sent]
    breaks: list[Break]
    tail: PrefixTail | None = None

    @property
    def undeclared(self) -> list[Break]:
        return [b for b in self.breaks if not b.declared]

    def requests_record(self) -> list[dict[str, Any]]:
        rows = []
        for s in self.sent:
            if s.refused is not None:
                rows.append({"messages": s.messages, "refused": s.refused})
            else:
                rows.append({"messages": s.messages, "tokens": len(s.ids), "sha256": s.sha256})
        return rows


def check(engine: Engine, requests: Sequence[Request], tail: PrefixTail | None = None,
          label: str = "", decode: Decode | None = None,
          advance: Callable[[int], None] | None = None) -> Result:
    """Send each request through the engine and find the breaks between consecutive ones.
    A request the engine refuses is recorded as refused and left out of the comparison;
    any other engine failure propagates (an EngineError). `advance(i)` after each request."""
    sent = []
    for i, request in enumerate(requests):
        if advance is not None:
            advance(i)
        count = len(request["messages"])
        try:
            ids = engine.ids(request)
        except Refused as refusal:
            sent.append(Sent(count, refused=str(refusal)))
            continue
        sent.append(Sent(count, list(ids), pieces_of(ids, decode)))
    breaks = find_breaks(sent, tail.tokens if tail else 0)
    answered = [r for r, s in zip(requests, sent) if s.refused is None]
    pairs = {(len(a["messages"]), len(b["messages"])): (a, b) for a, b in zip(answered, answered[1:])}
    for item in breaks:
        if item.declared and tail is not None:
            item.hint = f"declared tail of {tail.tokens}: {tail.reason}"
        elif (item.earlier, item.later) in pairs:
            item.hint = diagnose(*pairs[(item.earlier, item.later)])
    return Result(label=label, engine=engine.name, sent=sent, breaks=breaks, tail=tail)
