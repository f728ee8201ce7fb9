"""A `goldens check` run's full result as data: what `check --results F.json` and `check --json`
write and `goldens report merge` reads back.

The document (format 1, canonical JSON, keys stable):

    {"format": 1, "tool": "goldens check",
     "plan": {"groups": G, "replays": R, "fingerprint": "sha256 of the selection"},
     "shard": {"index": K, "count": N} or null,
     "exit_code": 0 | 1 | 2, "verdict": "passed" | "failed (...)", "summary": "485 checked: ...",
     "counts": {"verdicts": {status: n}, "findings": {status: n}, "stale_causes": n},
     "refusals": [the models whose checked cases mostly both refuse, each with why],
     "notes": [...], "versions": {engine label: version}, "elapsed": seconds,
     "coverage": {model: {executed, executable, percent, never_executed: [...]}} or null
                 (filled by check --coverage),
     "groups": [{"index": g, "model": M, "engine": label, "seconds": s,
                 "outcomes": [{case, engine, status, kind, detail, level, refused, unreachable,
                               version, reason, stand_in, cause, edit, advice,
                               divergence: {...} | null}]}]}

`status` "both-refuse" is a case the reference and the engine both refuse (passes; never a
match); `cause` the reviewed cause a known outcome matched; `edit` a drift's first edit
({at, replace, with}: replay/judging/causes.py), which drifts sharing it are grouped by.

A group is one (model, engine label) of the plan, `index` its place in the unsharded run, so a
merge of shards puts every outcome back where one run would have it; `fingerprint` names the
selection, so shards of different selections are never merged.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from generator import canonical, files
from generator.errors import GoldensError
from generator.replay.judging.divergence import Divergence
from generator.replay.judging.outcome import Outcome
from generator.replay.reporting.report import Summary, counts

FORMAT = 1
_OUTCOME_FIELDS = ("case", "engine", "status", "kind", "detail", "level", "refused", "unreachable",
                   "version", "reason", "stand_in")
_ADDED_FIELDS = {"cause": None, "edit": None, "advice": "", "axis": "render"}  # added later: absent in older files
SCHEMA = "goldens.results/1"  # the document's versioned name, as the other --json documents say theirs


@dataclasses.dataclass
class Group:
    """One (model, engine label) of the plan: its place in the unsharded run and its outcomes."""

    index: int
    model: str
    engine: str
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    seconds: float = 0.0  # measured: opening the engine (a server start) and replaying its cases

    @property
    def key(self) -> str:
        """The group's name in a durations file: 'qwen3 vllm', 'gemma3 llama-server@10429'."""
        return f"{self.model} {self.engine}"


@dataclasses.dataclass
class Plan:
    groups: int
    replays: int
    fingerprint: str


@dataclasses.dataclass
class Results:
    plan: Plan
    groups: list[Group]
    notes: list[str] = dataclasses.field(default_factory=list)
    elapsed: float = 0.0
    shard: tuple[int, int] | None = None
    coverage: dict[str, dict] | None = None  # model -> template coverage record (check --coverage)

    @property
    def outcomes(self) -> list[Outcome]:
        return [o for group in sorted(self.groups, key=lambda g: g.index) for o in group.outcomes]

    @property
    def summary(self) -> Summary:
        return Summary(self.outcomes, list(self.notes), self.coverage)

    def durations(self) -> dict[str, float]:
        return {group.key: round(group.seconds, 3) for group in self.groups}


def fingerprint(selection: Sequence[tuple[str, str, Sequence[str]]]) -> str:
    """The selection's name: sha256 of every (model, engine label, cases) of the plan, in order."""
    return canonical.digest([[m, e, list(c)] for m, e, c in selection], keep_order=True)


def outcome_data(outcome: Outcome) -> dict:
    data = {name: getattr(outcome, name) for name in (*_OUTCOME_FIELDS, *_ADDED_FIELDS)}
    data["divergence"] = dataclasses.asdict(outcome.divergence) if outcome.divergence is not None else None
    data["class"] = outcome.klass  # a known divergence's class (engine-defect, policy, reference)
    return data


_CASE = re.compile(r"[a-z0-9][a-z0-9.-]{0,63}/(parse/)?[a-z0-9][a-z0-9_-]{0,63}(--[a-z0-9][a-z0-9-]{0,63})?")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}")
_TEXT_FIELDS = ("detail", "version", "reason", "stand_in")


def _checked(data: Any) -> dict:
    """An outcome as a results file states it, validated: its names as the matrix spells them
    (a case id with a newline would print a raw `::error` line under GitHub Actions), its
    status and kind ones the judge gives (an unknown `bogus` must not pass the gate), the
    status the one its kind counts under, and each field of its type."""
    from generator.replay.judging.outcome import KIND_STATUS

    if not isinstance(data, dict):
        raise TypeError("an outcome is not an object")
    case, engine, status, kind = data["case"], data["engine"], data["status"], data["kind"]
    if not isinstance(case, str) or not _CASE.fullmatch(case):
        raise ValueError(f"case {str(case)[:80]!r} is not a case id")
    if not isinstance(engine, str) or not _LABEL.fullmatch(engine):
        raise ValueError(f"engine {str(engine)[:80]!r} is not an engine label")
    if kind not in KIND_STATUS or KIND_STATUS[kind] != status:
        raise ValueError(f"{case} [{engine}]: status {str(status)[:40]!r} with kind {str(kind)[:40]!r} is not "
                         "a verdict goldens gives")
    if data.get("axis", "render") not in ("render", "parse"):
        raise ValueError(f"{case} [{engine}]: axis {str(data.get('axis'))[:40]!r}")
    if data["level"] not in ("ids", "count"):
        raise ValueError(f"{case} [{engine}]: level {str(data['level'])[:40]!r}")
    for name in ("refused", "unreachable"):
        if not isinstance(data[name], bool):
            raise ValueError(f"{case} [{engine}]: {name} is not true or false")
    for name in _TEXT_FIELDS:
        if data[name] is not None and not isinstance(data[name], str):
            raise ValueError(f"{case} [{engine}]: {name} is not text")
    return data


def outcome_from(data: dict) -> Outcome:
    data = _checked(data)
    div = data.get("divergence")
    divergence = None
    if div is not None:
        divergence = Divergence(**{**div, "expected": [tuple(e) for e in div["expected"]],
                                   "actual": [tuple(e) for e in div["actual"]],
                                   "run": tuple(div["run"]) if div.get("run") is not None else None})
    return Outcome(**{name: data[name] for name in _OUTCOME_FIELDS},
                   **{name: data.get(name, default) for name, default in _ADDED_FIELDS.items()},
                   divergence=divergence, klass=data.get("class") if isinstance(data.get("class"), str) else None)


def to_data(results: Results) -> dict:
    summary = results.summary
    return {
        "schema": SCHEMA,
        "format": FORMAT,
        "tool": "goldens check",
        "plan": dataclasses.asdict(results.plan),
        "shard": {"index": results.shard[0], "count": results.shard[1]} if results.shard else None,
        "exit_code": summary.exit_code(),
        "verdict": summary.verdict(),
        "summary": summary.line(),
        "counts": {"verdicts": counts(summary.verdicts), "findings": counts(summary.findings),
                   "stale_causes": len(summary.stale_causes),
                   "classes": {name: {"cases": n, "causes": k} for name, (n, k) in summary.classes().items()}},
        "notes": list(results.notes),
        "versions": summary.versions(),
        "elapsed": round(results.elapsed, 3),
        "coverage": results.coverage,
        "refusals": summary.refusals(),
        "groups": [{"index": g.index, "model": g.model, "engine": g.engine, "seconds": round(g.seconds, 3),
                    "outcomes": [outcome_data(o) for o in g.outcomes]} for g in results.groups],
    }


def dumps(results: Results) -> str:
    return json.dumps(to_data(results), indent=1, ensure_ascii=False) + "\n"


def load(path: Path) -> Results:
    """A results file, or one line saying why it cannot be merged."""
    try:
        data = json.loads(files.read_bytes(Path(path), f"{path}: results").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GoldensError(f"{path}: not a goldens results file ({error})") from None
    if not isinstance(data, dict) or data.get("tool") != "goldens check" or data.get("format") != FORMAT:
        raise GoldensError(f"{path}: not a goldens check results file of format {FORMAT}")
    try:
        shard = data["shard"]
        return Results(
            plan=Plan(**data["plan"]),
            groups=[Group(int(g["index"]), _name(g["model"], "model"), _name(g["engine"], "engine"),
                          [outcome_from(o) for o in g["outcomes"]], float(g["seconds"]))
                    for g in data["groups"]],
            notes=list(data["notes"]), elapsed=float(data["elapsed"]),
            shard=(int(shard["index"]), int(shard["count"])) if shard else None,
            coverage=data.get("coverage"))
    except (KeyError, TypeError, ValueError) as error:
        raise GoldensError(f"{path}: a malformed results file ({type(error).__name__}: {error})") from None


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _LABEL.fullmatch(value):
        raise ValueError(f"{what} {str(value)[:80]!r} is not a name goldens gives")
    return value


def failed(results: Results, path: Path) -> str | None:
    """A shard whose own run could not judge (an error outcome, or nothing judged), named."""
    if results.groups and results.summary.exit_code() == 2:
        index, total = results.shard or (1, 1)
        return f"shard {index}/{total} ({path}) could not judge: {results.summary.verdict()}"
    return None


NOT_CASES = ("cause-stale", "invariant", "dispute-stale")  # outcomes a group carries beside its cases' verdicts


def verdict_cases(group: Group) -> list[str]:
    """The cases a group judged, in order: its engine's verdicts, not its stand-in findings,
    stale causes or the model's invariant findings."""
    return [o.case for o in group.outcomes
            if o.engine == group.engine and o.stand_in is None and o.kind not in NOT_CASES]


def against_plan(plan: Plan, groups: Sequence[Group]) -> list[str]:
    """What makes these groups not the run `plan` fingerprinted (issue 44: a shard with outcomes
    removed, a case added or renamed merged with exit 0): every group of the plan, each case it
    replays judged once, in the plan's order, and nothing else."""
    if [g.index for g in groups] != list(range(plan.groups)):
        return [f"the groups are not the plan's {plan.groups} (model, engine) groups"]
    judged = [(g.model, g.engine, verdict_cases(g)) for g in groups]
    count = sum(len(cases) for _, _, cases in judged)
    if count != plan.replays:
        return [f"{count} cases judged, but the plan replays {plan.replays}: outcomes were removed or added "
                "(a results file edited or cut short)"]
    if fingerprint(judged) != plan.fingerprint:
        return ["the cases judged are not the plan's (its fingerprint differs: a case renamed, moved or "
                "replaced in a results file)"]
    return []


def merge(paths: Sequence[Path]) -> tuple[Results, list[str], list[str]]:
    """The shards' results as one run's, and the problems that make the merge unable to judge
    (exit 2): a file that cannot be read, shards of different selections or counts, a shard
    missing or given twice, a group missing. A shard that failed on its own is in the merged
    outcomes (its errors make the merge 2 as they would one run) and named in the third list."""
    problems: list[str] = []
    loaded: list[tuple[Path, Results]] = []
    for path in paths:
        try:
            loaded.append((path, load(path)))
        except GoldensError as error:
            problems.append(str(error))
    if not loaded:
        raise GoldensError("nothing to merge: no results file could be read" +
                           (f" ({problems[0]})" if problems else ""))
    first_path, first = loaded[0]
    counts_seen = {r.shard[1] if r.shard else 1 for _, r in loaded}
    if len(counts_seen) > 1:
        problems.append(f"the results are of different shard counts ({', '.join(map(str, sorted(counts_seen)))})")
    for path, result in loaded[1:]:
        if result.plan.fingerprint != first.plan.fingerprint:
            problems.append(f"{path}: a different selection from {first_path} (plan fingerprints differ)")
    total = max(counts_seen)
    seen: dict[int, Path] = {}
    for path, result in loaded:
        index = result.shard[0] if result.shard else 1
        if index in seen:
            problems.append(f"shard {index}/{total} given twice ({seen[index]}, {path})")
        seen[index] = path
    for index in range(1, total + 1):
        if index not in seen:
            problems.append(f"shard {index}/{total} missing: its results were not given (did that job fail?)")
    groups: dict[int, Group] = {}
    for _, result in loaded:
        for group in result.groups:
            groups.setdefault(group.index, group)
    missing = [i for i in range(first.plan.groups) if i not in groups]
    if missing and not any("missing" in p for p in problems):
        problems.append(f"{len(missing)} of {first.plan.groups} (model, engine) groups have no results")
    if not missing and not problems:
        problems += against_plan(first.plan, [groups[i] for i in sorted(groups)])
    # notes in the plan's order, as one run writes them (a shard notes the models it ran): the
    # shards taken by the first group each holds, not in the order they were given
    in_plan_order = sorted(loaded, key=lambda pr: min((g.index for g in pr[1].groups), default=first.plan.groups))
    notes = list(dict.fromkeys(note for _, r in in_plan_order for note in r.notes))
    coverage = {name: record for _, r in loaded for name, record in (r.coverage or {}).items()}
    merged = Results(plan=first.plan, groups=sorted(groups.values(), key=lambda g: g.index), notes=notes,
                     elapsed=sum(r.elapsed for _, r in loaded),
                     coverage=dict(sorted(coverage.items())) if any(r.coverage is not None for _, r in loaded) else None)
    return merged, problems, [text for path, r in loaded if (text := failed(r, path)) is not None]
