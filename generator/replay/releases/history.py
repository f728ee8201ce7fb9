"""`goldens history`: every release in a range after which some case's ids differ from the
release before, found by recursive k-ary search.

Both ends of the range are replayed on the selected cases; a segment whose ends disagree on
some case is split `jobs` + 1 ways (the releases of one round made ready `jobs` at a time) until
each change lies between two neighbouring published releases. A segment whose ends agree on
every case is not searched further (a change there and back again is missed) unless
`exhaustive`. A release that cannot be made ready or asked here (a vLLM release whose install
does not resolve, a server that does not start) is named with its reason and passed over: the
search splits its segment at the releases around it, so a change point may then lie after
several releases (`skipped`) that could not be asked. Each release's answers are remembered under goldens' cache
(releases.AnswerStore), and builds and venvs are bisect's, so a second run over an overlapping
range builds and installs nothing. A change point lists the cases it changed, grouped by their
first edit (the same ids removed and added at the first place the answers part: one cause),
with the release's tag.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from generator.config.cases import Case
from generator.config.models import Config
from generator.errors import GoldensError, first_line
from generator.goldens.alignment import opcodes
from generator.replay.releases.bisect import readiness
from generator.replay.releases.releases import (
    Answer,
    AnswerStore,
    Replayed,
    cases_for,
    decoder,
    describe,
    divergence,
    line,
    points,
    ready_all,
    replay,
    span,
)

COMMAND = "history"
EDIT_SHOWN = 16  # the first edit's tokens a change point lists on each side


@dataclass
class Visit:
    """One release the search asked: how it was made ready, and its answers."""

    version: str
    seconds: float  # making it ready (0 when cached or not needed)
    cache: str  # "cached", "answers cached" (nothing to ready), or "built (...)", "installed (venv)"
    answers: dict[str, Answer]
    remembered: int  # answers read from the answers' cache
    round: int

    @property
    def made(self) -> str | None:
        """What this run did to make the release ready (built, installed), else None."""
        verb = self.cache.split(" ", 1)[0]
        return verb if verb in ("built", "installed") else None


@dataclass
class Group:
    """Cases one change point changed in the same way: the same first edit."""

    cases: list[str]
    index: int | None  # the first divergent token (None when a side refused)
    removed: list[tuple[int, str]]  # (id, piece) the older release had there
    added: list[tuple[int, str]]  # what the newer one has
    summary: str  # "drift at token 166 (207 vs 227 tokens)", or what each side refused
    detail: str  # the first case's divergence, both windows


@dataclass
class ChangePoint:
    release: str
    before: str
    cases: list[str]
    groups: list[Group] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # releases between before and release not asked


@dataclass
class History:
    engine: str
    first: str
    last: str
    span: list[str]
    cases: list[Case]
    jobs: int
    exhaustive: bool
    visits: dict[str, Visit]
    rounds: int
    changes: list[ChangePoint]
    seconds: float
    unavailable: dict[str, str] = field(default_factory=dict)  # release -> why it could not be asked


def history(config: Config, engine: str, first: str, last: str, models: Sequence[str] = (),
            case_ids: Sequence[str] = (), *, jobs: int = 1, exhaustive: bool = False,
            echo: Callable[[str], None] = print, note: Callable[[str], None] | None = None,
            store: AnswerStore | None = None) -> History:
    """Search the published releases from `first` to `last` (oldest to newest whichever order
    they are given in) for every change point, printing each release asked and each round."""
    versions = line(engine, COMMAND)
    if jobs < 1:
        raise GoldensError(f"history --jobs: 1 or more, got {jobs}")
    started = time.monotonic()
    cases = cases_for(config, engine, models, case_ids)  # bad input refused before the package index is read
    releases = span(engine, first, last, ("--from", "--to"), COMMAND)
    reversed_range = versions.order(releases[0]) > versions.order(releases[-1])
    if reversed_range:
        releases = releases[::-1]
    store = store if store is not None else AnswerStore(config, engine)
    label = versions.label
    echo(f"history {engine}: {len(releases)} published releases from {label(releases[0])} to "
         f"{label(releases[-1])}, {len(cases)} case(s); {jobs} release(s) at a time"
         + (", every segment searched (--exhaustive)" if exhaustive else "")
         + (f" (--from {first} is newer than --to {last}: searched oldest to newest)" if reversed_range else ""))
    visits: dict[str, Visit] = {}
    unavailable: dict[str, str] = {}
    rounds = 0

    def ask(positions: list[int]) -> None:
        """One round: the releases whose answers are not all remembered made ready `jobs` at a
        time, then replayed `jobs` at a time (only the cases each has no remembered answer for:
        a release's servers or worker are its own processes, so replays of several overlap)."""
        nonlocal rounds
        rounds += 1
        chosen = [releases[p] for p in positions if releases[p] not in visits]
        need = [v for v in chosen if any(store.get(v, case) is None for case in cases)]
        failed: dict[str, str] = {}
        ready = ready_all(engine, need, jobs, failed) if need else {}
        for version in failed:
            _pass_over(version, failed[version])
        chosen = [version for version in chosen if version not in failed]

        def one(version: str) -> Replayed | None:
            try:
                return replay(config, engine, version, cases, note, store)
            except GoldensError as error:
                failed[version] = first_line(error)
                return None

        if jobs > 1 and len(chosen) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(jobs, len(chosen))) as pool:
                replays = list(pool.map(one, chosen))
        else:
            replays = [one(version) for version in chosen]
        for version, replayed in zip(chosen, replays):
            if replayed is None:
                _pass_over(version, failed[version])
                continue
            seconds, cache = ready.get(version, (0.0, "answers cached"))
            visits[version] = visit = Visit(version, seconds, cache, replayed.answers, replayed.remembered, rounds)
            echo(f"{label(version):>10}  round {rounds}  {_readiness(visit, len(cases))}")

    def _pass_over(version: str, reason: str) -> None:
        unavailable[version] = reason
        echo(f"{label(version):>10}  round {rounds}  cannot be asked here: {reason}")

    def agree(a: int, b: int) -> bool:
        x, y = visits[releases[a]].answers, visits[releases[b]].answers
        return all(x[case.id].same(y[case.id]) for case in cases)

    ask([0, len(releases) - 1])
    for end in (releases[0], releases[-1]):
        if end in unavailable:
            raise GoldensError(f"history {engine}: the range's end {label(end)} cannot be asked here "
                               f"({unavailable[end]}); choose another --from/--to")
    open_segments = [(0, len(releases) - 1)]
    adjacent: list[tuple[int, int]] = []
    while open_segments:
        split: dict[tuple[int, int], list[int]] = {}
        for low, high in open_segments:
            inner = [p for p in range(low + 1, high) if releases[p] not in unavailable]
            if not inner:  # neighbours, or only releases that cannot be asked between them
                adjacent.append((low, high))
            elif exhaustive or not agree(low, high):
                split[(low, high)] = [low, *inner, high]
        if not split:
            break
        # split among the releases that can still be asked (all of them until one fails)
        cuts = {segment: [among[i] for i in points(0, len(among) - 1, jobs)] for segment, among in split.items()}
        ask(sorted({p for chosen in cuts.values() for p in chosen}))
        open_segments = []
        for (low, high), chosen in cuts.items():
            bounds = [low, *(p for p in chosen if releases[p] not in unavailable), high]
            open_segments.extend(zip(bounds, bounds[1:]))
    changes = []
    for low, high in sorted(adjacent):
        if not agree(low, high):
            change = _change(config, releases[low], releases[high], visits, cases, label)
            change.skipped = releases[low + 1:high]
            changes.append(change)
    return History(engine, first, last, releases, cases, jobs, exhaustive, visits, rounds, changes,
                   time.monotonic() - started, unavailable)


def _readiness(visit: Visit, cases: int) -> str:
    if visit.remembered == cases:
        return f"all {cases} answers from the cache"
    ready = readiness(visit.seconds, visit.cache) if visit.cache != "answers cached" else "cached"
    return f"{ready}; {cases - visit.remembered} case(s) replayed, {visit.remembered} from the cache"


def _change(config: Config, before: str, release: str, visits: dict[str, Visit], cases: list[Case],
            label: Callable[[str], str]) -> ChangePoint:
    old, new = visits[before].answers, visits[release].answers
    changed = [case for case in cases if not old[case.id].same(new[case.id])]
    groups: dict[tuple, Group] = {}
    for case in changed:
        a, b = old[case.id], new[case.id]
        key = _edit_key(case, a, b)
        if key in groups:
            groups[key].cases.append(case.id)
            continue
        div = divergence(config, case, a, b)
        detail = describe(config, case, a, b, label(before), label(release))
        if div is None:
            summary = detail.split(": ", 1)[1]
            groups[key] = Group([case.id], None, [], [], summary, detail)
            continue
        removed, added = _first_edit(a.ids, b.ids)
        decode = decoder(config, case.model)
        removed, added = removed[:EDIT_SHOWN], added[:EDIT_SHOWN]
        groups[key] = Group(
            [case.id], div.index, list(zip(removed, decode(removed))), list(zip(added, decode(added))),
            div.summary(), detail)
    return ChangePoint(release, before, [case.id for case in changed], list(groups.values()))


def _first_edit(old: list[int], new: list[int]) -> tuple[list[int], list[int]]:
    """The ids the first non-equal opcode removes and adds."""
    for tag, i1, i2, j1, j2 in opcodes(old, new):
        if tag != "equal":
            return old[i1:i2], new[j1:j2]
    return [], []


def _edit_starts(old: list[int], new: list[int]) -> tuple[int, int]:
    for tag, i1, _, j1, _ in opcodes(old, new):
        if tag != "equal":
            return i1, j1
    return len(old), len(new)


def _edit_key(case: Case, old: Answer, new: Answer) -> tuple:
    """One cause: the same model, the same ids removed and added by the first edit (or the same
    refusal change)."""
    if old.kind == new.kind == "parse":
        from generator.replay.releases.releases import parse_change

        return case.model, "parse", parse_change(old.parse, new.parse).split(":")[0]
    if not old.answered or not new.answered:
        return case.model, "refusal", old.kind, new.kind, tuple(old.ids), tuple(new.ids)
    removed, added = _first_edit(old.ids, new.ids)
    return case.model, "edit", tuple(removed), tuple(added)


def lower_bound(releases: int, changes: Sequence[ChangePoint], order: dict[str, int]) -> int:
    """The fewest releases any search must ask to name these change points: both ends, and for
    each change point the release before it and itself (a change is seen only between them)."""
    witnesses = {0, releases - 1}
    for change in changes:
        witnesses.update({order[change.before], order[change.release]})
    return len(witnesses)


def summary_lines(result: History, versions) -> list[str]:
    """What `goldens history` prints after the releases asked: each change point (its tag, the
    cases it changed, one line per group and the first group's windows), then the cost."""
    label = versions.label
    url = getattr(versions, "release_url", lambda version: None)
    lines = []
    if not result.changes:
        lines.append(f"no release from {label(result.span[0])} to {label(result.span[-1])} changed any of the "
                     f"{len(result.cases)} case(s)" + ("" if result.exhaustive else
                                                        " (segments whose ends agree were not searched)"))
    else:
        lines.append(f"{len(result.changes)} change point(s): " + ", ".join(label(c.release) for c in result.changes))
    for change in result.changes:
        link = url(change.release)
        lines.append("")
        skipped = f" (or {', '.join(label(v) for v in change.skipped)}, not asked)" if change.skipped else ""
        lines.append(f"{label(change.release)}{skipped} (after {label(change.before)}): {len(change.cases)} case(s) "
                     f"changed, {len(change.groups)} group(s)" + (f"  {link}" if link else ""))
        for group in change.groups:
            shown = ", ".join(group.cases[:4]) + (f" and {len(group.cases) - 4} more" if len(group.cases) > 4 else "")
            edit = ""
            if group.index is not None:
                edit = (f": {' '.join(repr(p) for _, p in group.removed) or '(nothing)'} -> "
                        f"{' '.join(repr(p) for _, p in group.added) or '(nothing)'}")
            lines.append(f"  {shown}: {group.summary}{edit}")
        lines.extend("    " + row for row in (change.groups[0].detail.splitlines()[1:] if change.groups else []))
    visits = list(result.visits.values())
    made = [v.made for v in visits]
    order = {version: position for position, version in enumerate(result.span)}
    lines.append("")
    if result.unavailable:
        lines.append(f"{len(result.unavailable)} release(s) could not be asked here: " + "; ".join(
            f"{label(v)} ({why})" for v, why in sorted(result.unavailable.items(), key=lambda i: order[i[0]])))
    lines.append(f"{result.rounds} rounds, {len(visits)} of {len(result.span)} releases asked "
                 f"({made.count('built')} built, {made.count('installed')} installed, "
                 f"{sum(1 for v in visits if v.remembered == len(result.cases))} answered from the cache), "
                 f"{result.seconds:.0f} s wall ({sum(v.seconds for v in visits):.0f} s making releases ready); "
                 f"any search asks at least {lower_bound(len(result.span), result.changes, order)}")
    return lines


def document(result, versions) -> dict[str, Any]:
    """A `goldens history` run as data (`goldens.history/1`): the range, every release asked (how it was made ready, how many
    answers came from the cache), every change point with its cases grouped by first edit and
    its release's tag, and what the search cost beside the floor any search pays."""
    label = versions.label
    order = {version: position for position, version in enumerate(result.span)}
    visits = list(result.visits.values())
    return {
        "engine": result.engine, "from": result.first, "to": result.last,
        "releases": [label(v) for v in result.span], "jobs": result.jobs, "exhaustive": result.exhaustive,
        "rounds": result.rounds, "cases": [case.id for case in result.cases],
        "asked": [{"release": v.version, "label": label(v.version), "round": v.round,
                   "ready_seconds": round(v.seconds, 1), "cache": v.cache, "answers_from_cache": v.remembered}
                  for v in sorted(visits, key=lambda v: order[v.version])],
        "unavailable": [{"release": v, "label": label(v), "reason": why}
                        for v, why in sorted(result.unavailable.items(), key=lambda item: order[item[0]])],
        "change_points": [change_point(c, versions) for c in result.changes],
        "cost": {"releases_in_range": len(result.span), "asked": len(visits),
                 "built": sum(1 for v in visits if v.made == "built"),
                 "installed": sum(1 for v in visits if v.made == "installed"),
                 "ready_seconds": round(sum(v.seconds for v in visits), 1),
                 "answers_replayed": sum(len(result.cases) - v.remembered for v in visits),
                 "answers_from_cache": sum(v.remembered for v in visits),
                 "floor": lower_bound(len(result.span), result.changes, order),
                 "wall_seconds": round(result.seconds, 1)},
        "exit_code": 1 if result.changes else 0,
    }


def change_point(change, versions) -> dict[str, Any]:
    """One change point as data (`goldens.history/1` and the atlas)."""
    url = getattr(versions, "release_url", lambda version: None)
    return {"release": change.release, "label": versions.label(change.release), "url": url(change.release),
            "before": change.before, "before_label": versions.label(change.before),
            "skipped": [versions.label(v) for v in change.skipped], "cases": change.cases,
            "groups": [{"cases": g.cases, "first_divergent_token": g.index,
                        "removed": [list(t) for t in g.removed], "added": [list(t) for t in g.added],
                        "summary": g.summary, "detail": g.detail} for g in change.groups]}
