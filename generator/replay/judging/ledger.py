"""The reviewed-divergence ledger: committed per-engine expectations beside the goldens.

An entry is `goldens/<model>/<stem>.<engine>.json`, the golden format plus `engine` and `reason`:
an engine that still gives exactly those ids (or still refuses) passes; one that moves, or that
matches the reference again, is reported, so a fix upstream is noticed too.

A stand-in entry, `goldens/<model>/<stem>.<engine>.stand-in.json`, records the same for an engine's
stand-in endpoint (vLLM's /tokenize, llama-server's /apply-template + /tokenize) where it reviewed
as disagreeing with the engine's serving path: the stand-in's own ids, `stand_in` naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator import files
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging import causes
from generator.replay.judging.divergence import divergence_point


@dataclass
class Entry:
    """A reviewed divergence: what `engine` gives for a case instead of the golden, and why."""

    case: str
    engine: str
    reason: str
    ids: list[int]
    pieces: list[str]
    prompt: str | None
    path: Path | None = None
    refused: str | None = None  # the engine's refusal, when what was reviewed is that it refuses
    engine_version: str | None = None  # what the engine reported when it was reviewed
    stand_in: str | None = None  # a stand-in entry: the stand-in endpoint it is about
    klass: str = causes.UNCLASSIFIED  # engine-defect, policy or reference (causes.CLASSES)
    cause: tuple[str, ...] = ()  # the reviewed causes whose reason (and class) it shares
    upstream: tuple[str, ...] = ()  # an engine-defect's upstream issue or pull request


STAND_IN = "stand-in"  # the last part of a stand-in entry's name


def entry_path(root: Path, case_id: str, engine: str, stand_in: bool = False) -> Path:
    return root / f"{case_id}.{engine}{'.' + STAND_IN if stand_in else ''}.json"


def read_stand_in(root: Path, case_id: str, engine: str) -> Entry | None:
    """The engine's reviewed stand-in entry for a case, if there is one."""
    return read(root, case_id, engine, stand_in=True)


def read(root: Path, case_id: str, engine: str, stand_in: bool = False) -> Entry | None:
    path = entry_path(root, case_id, engine, stand_in)
    if not path.exists():
        return None
    item = golden_file.read(path)
    if item.extra.get("engine") != engine:
        raise GoldensError(f"{path}: `engine` must be {engine!r}")
    endpoint = item.extra.get("stand_in")
    if stand_in and (not isinstance(endpoint, str) or not endpoint.strip()):
        raise GoldensError(f"{path}: a stand-in ledger entry needs `stand_in`, the endpoint it is about")
    reason, klass, named, upstream = classify(root, item.extra, path)
    return Entry(case=item.case, engine=engine, reason=reason, ids=item.ids, pieces=item.pieces,
                 prompt=item.prompt, path=path, refused=item.error if item.outcome == "error" else None,
                 engine_version=item.extra.get("engine_version"), stand_in=endpoint if stand_in else None,
                 klass=klass, cause=named, upstream=upstream)


def classify(root: Path, extra: dict, path: Path) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    """An entry's reason, class, causes and upstream links: its own `reason` (and `class`), or
    those of the reviewed causes it names (`"cause": NAME` or a list: a case two causes shape at
    once), said once in goldens/causes/. Any ledger entry can carry a class, parse entries too."""
    named = extra.get("cause")
    names = (named,) if isinstance(named, str) else tuple(named) if isinstance(named, list) else ()
    if named is not None and (not names or not all(isinstance(n, str) and n for n in names)):
        raise GoldensError(f"{path}: `cause` must be a cause's name or a list of names")
    reason = extra.get("reason")
    upstream = extra.get("upstream") or []
    if not isinstance(upstream, list) or not all(isinstance(u, str) and u.startswith("https://") for u in upstream):
        raise GoldensError(f"{path}: `upstream` must be a list of https:// links")
    klass = extra.get("class")
    if klass is not None:
        causes.check_class(klass, str(path))
    if not names:
        if not isinstance(reason, str) or not reason.strip():
            raise GoldensError(f"{path}: a ledger entry needs a non-empty `reason` (or the `cause` it shares)")
        return reason, klass or causes.UNCLASSIFIED, (), tuple(upstream)
    found = []
    for name in names:
        cause = causes.named(Path(root), name)
        if cause is None:
            raise GoldensError(f"{path}: `cause` {name!r} is not a reviewed cause ({causes.path_of(root, name)})")
        found.append(cause)
    if isinstance(reason, str) and reason.strip():
        raise GoldensError(f"{path}: an entry that names its cause says no `reason` of its own (the cause's is it)")
    text = found[0].reason if len(found) == 1 else " AND ".join(f"[{c.name}] {c.reason}" for c in found)
    classes = [c.klass for c in found]
    klass = klass or ("engine-defect" if "engine-defect" in classes else classes[0])
    return text, klass, names, tuple(upstream) or tuple(u for c in found for u in c.upstream)


def write(root: Path, golden: golden_file.Golden, engine: str, reason: str | None,
          ids: Sequence[int], pieces: Sequence[str], prompt: str | None,
          refused: str | None = None, engine_version: str = "", stand_in: str | None = None,
          klass: str | None = None, cause: Sequence[str] = (), upstream: Sequence[str] = ()) -> Path:
    """Record a reviewed divergence beside its golden (same format, plus engine and reason);
    `refused` records that the engine declines a request the reference renders,
    `engine_version` what the engine reported itself as when it was reviewed, and `stand_in`
    makes it a stand-in entry about that endpoint. `klass` is its class (causes.CLASSES);
    `cause` names the reviewed causes it shares its reason and class with, instead of a reason."""
    index = None if refused else divergence_point(golden.ids, ids)
    said: dict = {"cause": cause[0] if len(cause) == 1 else list(cause)} if cause else {"reason": reason}
    if klass and not cause:
        said["class"] = causes.check_class(klass, "--class")
    if upstream:
        said["upstream"] = list(upstream)
    entry = golden_file.Golden(
        case=golden.case, request=golden.request, outcome="error" if refused else "ok",
        ids=[] if refused else list(ids), pieces=[] if refused else list(pieces),
        prompt=None if refused else prompt, error=refused, provenance=golden.provenance,
        extra={"engine": engine, "engine_version": engine_version or None,
               **({"stand_in": stand_in} if stand_in else {}), **said, "diverges_at": index},
    )
    path = entry_path(root, golden.case, engine, stand_in=stand_in is not None)
    files.atomic_write(path, golden_file.dumps(entry), within=root)
    return path
