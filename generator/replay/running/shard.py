"""`check --shard K/N`: a deterministic partition of a run's (model, engine label) groups.

A group stays whole on one shard, so each managed server starts once. Groups are balanced by
cost, longest first onto the least loaded shard (ties to the lower shard, then the plan's order):
a group's cost is its measured seconds from a durations file (`check --store-durations F`,
read back with `--durations F`, as pytest-split does), else an estimate from its replay count
and the engine's server start.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from generator import files
from generator.errors import GoldensError

# Rough costs where nothing was measured, in seconds: only their proportions matter, and a durations
# file replaces them (qwen3's vLLM group, a server start and 30 cases, measured 198 s on 2 loaded cores).
REPLAY_SECONDS = 0.2


MAX_SHARDS = 1000  # far more runners than any CI gives one job


def parse(text: str) -> tuple[int, int]:
    """'2/3' -> (2, 3); K counts from 1."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise GoldensError(f"--shard {text}: expected K/N, e.g. 2/3")
    if len(match[1]) > 6 or len(match[2]) > 6:
        raise GoldensError(f"--shard {text.strip()[:40]}: N is at most {MAX_SHARDS}")
    k, n = int(match[1]), int(match[2])
    if n > MAX_SHARDS:
        raise GoldensError(f"--shard {text}: N is at most {MAX_SHARDS}")
    if n < 1 or not 1 <= k <= n:
        raise GoldensError(f"--shard {text}: K must be from 1 to N")
    return k, n


def estimate(engine_label: str, replays: int) -> float:
    """A group's rough cost: its engine's managed server start (the registry's start_seconds;
    nothing for an engine that starts none, or a --url name it does not know) and its replays."""
    from generator.config import engine_registry

    name = engine_label.partition("@")[0]
    info = engine_registry.available().get(name)
    start = info.server.start_seconds if info is not None and info.server is not None else 0.0
    return start + REPLAY_SECONDS * replays


def partition(groups: Sequence[tuple[str, int]], n: int,
              durations: Mapping[str, float] | None = None) -> list[list[int]]:
    """Group indices per shard (n lists) for `groups` = (key 'model engine', replays) in plan
    order; each list in plan order. Deterministic: the same input, the same partition."""
    durations = durations or {}

    def cost(i: int) -> float:
        key, replays = groups[i]
        return float(durations[key]) if key in durations else estimate(key.split(" ", 1)[1], replays)

    loads = [0.0] * n
    shards: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(groups)), key=lambda i: (-cost(i), i)):
        target = min(range(n), key=lambda s: (loads[s], s))
        shards[target].append(i)
        loads[target] += cost(i)
    return [sorted(s) for s in shards]


def read_durations(path: Path) -> dict[str, float]:
    try:
        data = json.loads(files.read_bytes(Path(path), f"--durations {path}").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise GoldensError(f"--durations {path}: not JSON ({error})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, (int, float))
                                             and not isinstance(v, bool) and v >= 0 for k, v in data.items()):
        raise GoldensError(f"--durations {path}: expected an object of 'model engine': seconds")
    return {k: float(v) for k, v in data.items()}


def merged_durations(path: Path, measured: Mapping[str, float]) -> str:
    """The durations file updated with this run's measurements (others kept), canonical JSON."""
    old = read_durations(path) if Path(path).exists() else {}
    old.update({k: round(v, 3) for k, v in measured.items()})
    return json.dumps(dict(sorted(old.items())), indent=1) + "\n"


def select(groups: Sequence, shard_text: str | None,
           durations_path: Path | None) -> tuple[set[int] | None, tuple[int, int] | None]:
    """`--shard K/N` (and `--durations F`) over check's (model, engine spec, cases) groups: the
    indexes of the groups shard K replays and (K, N); (None, None) without --shard."""
    only, part = None, None
    if shard_text is not None:
        part = parse(shard_text)
        durations = read_durations(durations_path) if durations_path is not None else None
        only = set(partition([(f"{m} {spec.label}", len(c)) for m, spec, c in groups], part[1],
                             durations)[part[0] - 1])
    elif durations_path is not None:
        raise GoldensError("--durations balances --shard; give --shard K/N too")
    return only, part


def empty(config, work, groups: Sequence, part: tuple[int, int], no_confirm: bool, junit_path: Path | None,
          report_path: Path | None, results_path: Path | None, as_json: bool, axis: str = "both",
          urls: dict | None = None) -> None:
    """An empty shard: its reports say so (for `report merge`), and it exits 0 having started nothing."""
    import sys

    import click

    from generator.replay.running import check as checking
    from generator.replay.reporting import destination, publish
    from generator.replay.reporting import results as results_data

    results = results_data.Results(checking.selection(config, work, axis, urls), [], shard=part,
                                   notes=[checking.NO_CONFIRM] if no_confirm else [])
    with destination.claim(junit_path, report_path, results_path):
        publish.write_files(results, junit_path, report_path, results_path)
    if as_json:
        click.echo(results_data.dumps(results), nl=False)
    click.echo(f"nothing to check: shard {part[0]}/{part[1]} is empty (the partition gives all "
               f"{len(groups)} (model, engine) groups to other shards)", err=as_json)
    sys.exit(0)
