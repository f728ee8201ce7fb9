"""What a sharded `goldens check` costs: the cost model behind `--shard K/N`, measured.

One unsharded run (`check --store-durations --results`) gives every (model, engine) group's
seconds and replay count. Per engine, a least-squares line through its groups, seconds =
start + replays x per-replay, splits a group's cost into the server (or tokenizer) start and the
cost of one replay (an engine with a single group reports seconds per replay only); the run's
wall time outside its groups is the process's own (imports, sources, reports). Then, for each N
of --shards, the N shard processes run at once (`check --shard K/N --durations F`) and their
wall time is printed beside the prediction (the process's own time plus the most loaded shard's
measured seconds, from the same partition) and the floor (the process's own time plus the
largest group, or plus the run's group time over the cores the processes share).

    .venv/bin/python bench/shards.py [--engine E]... [--model M]... [--shards 1,2,4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from generator.replay.running import shard  # noqa: E402


def goldens(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "generator.cli", "check", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> None:
    _, err = process.communicate()
    if process.returncode not in (0, 1):  # drift is a verdict; 2 means the run could not judge
        sys.exit(f"goldens check exited {process.returncode}: {err.strip()[-2000:]}")


def fit(points: list[tuple[int, float]]) -> tuple[float | None, float]:
    """(start, per-replay) of seconds = start + replays x per-replay; one point: (None, s/replays)."""
    if len({n for n, _ in points}) < 2:
        replays, seconds = sum(n for n, _ in points), sum(s for _, s in points)
        return None, seconds / max(replays, 1)
    mean_n = sum(n for n, _ in points) / len(points)
    mean_s = sum(s for _, s in points) / len(points)
    slope = (sum((n - mean_n) * (s - mean_s) for n, s in points)
             / sum((n - mean_n) ** 2 for n, _ in points))
    return max(mean_s - slope * mean_n, 0.0), max(slope, 0.0)


def _models(config: str) -> dict:
    from generator.config import models

    return models.load(Path(config)).models


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "models.yaml"))
    parser.add_argument("--engine", action="append", default=[])
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--shards", default="1,2,4")
    args = parser.parse_args()
    counts = [int(n) for n in args.shards.split(",")]
    selection = ["--config", args.config, "--goldens", str(ROOT / "goldens")]
    selection += [f"--engine={e}" for e in args.engine] + [f"--model={m}" for m in args.model]
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        durations, one = Path(tmp) / "durations.json", Path(tmp) / "one.json"
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        finish(goldens(*selection, "--store-durations", str(durations), "--results", str(one)))
        unsharded = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        data = json.loads(one.read_text(encoding="utf-8"))
        groups = [(f"{g['model']} {g['engine']}", len(g["outcomes"]), g["seconds"]) for g in data["groups"]]
        total = sum(s for _, _, s in groups)
        overhead = max(unsharded - total, 0.0)  # the process: imports, sources, reports
        print(f"{len(groups)} (model, engine) groups, {sum(n for _, n, _ in groups)} replays, "
              f"{total:.1f} s of group time; one process: {unsharded:.1f} s wall "
              f"({overhead:.1f} s outside the groups: imports, sources, reports)")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        # ru_maxrss of children is the largest one process reached (KiB), not the sum of those alive at once
        print(f"its CPU, servers and workers included: {cpu:.1f} s; the largest process: "
              f"{after.ru_maxrss / 1024:.0f} MB; verdict exit {data.get('exit_code')}")
        asked = {key.split(" ", 1)[0] for key, _, _ in groups}
        family = {name for name, model in _models(args.config).items()
                  if model.tokenizer.family is not None and name in asked}
        if family:
            share = sum(s for key, _, s in groups if key.split(" ", 1)[0] in family)
            print(f"built-in families ({len(family)} models: {', '.join(sorted(family))}): "
                  f"{share:.1f} s of the {total:.1f} s of group time, "
                  f"{sum(n for key, n, _ in groups if key.split(' ', 1)[0] in family)} replays")
        print("engine            groups  start (s)  per replay (s)")
        by_engine: dict[str, list[tuple[int, float]]] = {}
        for key, replays, seconds in groups:
            by_engine.setdefault(key.split(" ", 1)[1], []).append((replays, seconds))
        for engine, points in by_engine.items():
            start, per = fit(points)
            start_text = "-" if start is None else f"{start:.2f}"
            print(f"{engine:<17} {len(points):>6}  {start_text:>9}  {per:>14.3f}")
        measured = json.loads(durations.read_text(encoding="utf-8"))
        keyed = [(key, replays) for key, replays, _ in groups]
        print("shards  predicted (s)  measured (s)  floor (s)  measured / predicted")
        for n in counts:
            parts = shard.partition(keyed, n, measured)
            predicted = overhead + max(sum(groups[i][2] for i in part) for part in parts)
            floor = overhead + max(max(s for _, _, s in groups), total / min(n, cores))
            if n == 1:
                wall = unsharded
            else:
                started = time.perf_counter()
                running = [goldens(*selection, "--shard", f"{k}/{n}", "--durations", str(durations),
                                   "--results", str(Path(tmp) / f"shard-{k}.json")) for k in range(1, n + 1)]
                for process in running:
                    finish(process)
                wall = time.perf_counter() - started
            print(f"{n:>6}  {predicted:>13.1f}  {wall:>12.1f}  {floor:>9.1f}  {wall / predicted:>20.2f}")
    print(f"shards / predicted: the measured wall over the most loaded shard's seconds ({cores} cores)")


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "shards"))
