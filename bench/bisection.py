"""What `goldens bisect` costs with one job and with two, over the replays it cannot skip.

The same llama.cpp bisect (default: --good 9101 --bad 9247 --case phi3.5/prefill, the four
published builds b9101 b9113 b9246 b9247, b9246 the first changed) runs with --jobs 1 and with
--jobs 2, from the build cache: every release it can try is made ready first, outside the
timings (a build the first time, nothing after). Beside each, the floor measured in the same
run: each release the bisect tried, already built, started and replayed on the cases one after
the other, with no search around it (what any bisect of these releases pays). From the cache the
two jobs settings replay the same releases, so their walls are alike; `--jobs 2` saves rounds,
which pay off when the rounds build. Rounds and releases tried come from the bisect's own
report; wall times are the best of --repeat runs.

    .venv/bin/python bench/bisection.py [--good 9101] [--bad 9247] [--case phi3.5/prefill]... [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator.config import models  # noqa: E402
from generator.replay.releases import bisect, releases  # noqa: E402

ENGINE = "llama-server"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "models.yaml"))
    parser.add_argument("--good", default="9101")
    parser.add_argument("--bad", default="9247")
    parser.add_argument("--case", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    cases_ids = args.case or ["phi3.5/prefill"]
    config = models.load(args.config)
    span = bisect.releases(ENGINE, args.good, args.bad)
    cases = bisect.cases_for(config, ENGINE, (), cases_ids)
    line = releases.line(ENGINE)
    for version in span:
        seconds, cache = line.ready(version)
        if cache != "cached":
            print(f"made ready first (not timed): {line.label(version)} {cache} in {seconds:.0f} s")

    def run(jobs: int) -> tuple[float, dict]:
        reports: list[dict] = []
        started = time.perf_counter()
        code = bisect.bisect(config, ENGINE, args.good, args.bad, (), cases_ids, echo=lambda text: None,
                             jobs=jobs, report=reports.append)
        wall = time.perf_counter() - started
        (report,) = reports
        if code != 0 or any(t["cache"] != "cached" for t in report["tried"]):
            raise SystemExit(f"bisect --jobs {jobs}: exit {code}, tried {report['tried']}")
        return wall, report

    def floor(versions: list[str]) -> float:
        started = time.perf_counter()
        for version in versions:
            bisect._try(config, ENGINE, version, cases, None, None, (0.0, "cached"))
        return time.perf_counter() - started

    print(f"goldens bisect --engine {ENGINE} --good {args.good} --bad {args.bad} "
          f"{' '.join('--case ' + c for c in cases_ids)}: {len(span)} published releases, "
          f"from the build cache, best of {args.repeat}")
    for jobs in (1, 2):
        walls, floors = [], []
        for _ in range(args.repeat):
            wall, report = run(jobs)
            walls.append(wall)
            floors.append(floor([t["release"] for t in report["tried"]]))
        tried = " ".join(t["label"] for t in report["tried"])
        print(f"  --jobs {jobs}: {report['rounds']} rounds, {len(report['tried'])} releases tried ({tried}), "
              f"first changed {report['first_changed']['label']}; wall {min(walls):.2f} s, "
              f"floor (the {len(report['tried'])} releases replayed, built) {min(floors):.2f} s, "
              f"bisect / floor: x{min(walls) / min(floors):.2f}")


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "bisection"))
