"""What `goldens history` costs: releases made ready and asked against the releases in the range
and the floor any search pays, and wall time, first with no remembered answers, then again.

The first run starts from an empty answers store (a temporary folder): every release it asks is
made ready (a build or venv install when goldens' cache lacks it: the line says how many) and
replayed on every case. The floor is the fewest releases any search must ask to name the change
points it found: both ends, and each change point's release and the one before it. The second
run over the same range reads every answer from the store: it asks the same releases, makes none
ready and starts no server.

    .venv/bin/python bench/history.py [--engine transformers] [--from 5.20.1] [--to 5.24.0]
                                      [--case ID]... [--jobs 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator.config import engine_registry, models  # noqa: E402
from generator.replay.releases import history  # noqa: E402
from generator.replay.releases.releases import AnswerStore  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "models.yaml"))
    parser.add_argument("--engine", default="transformers")
    parser.add_argument("--from", dest="first", default="5.20.1")
    parser.add_argument("--to", dest="last", default="5.24.0")
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    config = models.load(args.config)
    versions = engine_registry.version_line(engine_registry.lookup(args.engine))
    with tempfile.TemporaryDirectory(prefix="goldens-history-bench-") as tmp:
        store = AnswerStore(config, args.engine, root=Path(tmp))
        runs = []
        for _ in range(2):
            started = time.perf_counter()
            result = history.history(config, args.engine, args.first, args.last, (), args.case, jobs=args.jobs,
                                     echo=lambda line: None, store=store)
            runs.append((time.perf_counter() - started, result))
    order = {version: position for position, version in enumerate(runs[0][1].span)}
    first = runs[0][1]
    print(f"goldens history --engine {args.engine} --from {args.first} --to {args.last} --jobs {args.jobs}"
          f"{''.join(' --case ' + c for c in args.case)}: {len(first.span)} published releases, "
          f"{len(first.cases)} case(s), {len(first.changes)} change point(s) "
          f"({', '.join(versions.label(c.release) for c in first.changes) or 'none'})")
    floor = history.lower_bound(len(first.span), first.changes, order)
    for name, (wall, result) in zip(("first run (no answers remembered)", "second run (answers remembered)"), runs):
        visits = list(result.visits.values())
        made = [v.made for v in visits]
        replayed = sum(len(result.cases) - v.remembered for v in visits)
        print(f"  {name}: {result.rounds} rounds, {len(visits)} of {len(result.span)} releases asked, "
              f"{made.count('built')} built, {made.count('installed')} installed "
              f"({sum(v.seconds for v in visits):.1f} s making them ready), {replayed} answers replayed; "
              f"wall {wall:.1f} s")
    print(f"  floor: {floor} releases (both ends, each change point and the release before it); "
          f"asked / floor: x{len(first.visits) / floor:.2f}; releases in range / asked: "
          f"x{len(first.span) / len(first.visits):.2f}")


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "history"))
