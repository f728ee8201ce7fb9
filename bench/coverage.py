"""What `goldens coverage` costs over the renders it traces.

The floor is the reference render of every case of the matrix, untraced, with every tokenizer
already loaded (what a regenerate renders). The same renders traced (coverage.trace) are timed
beside it in the same run, and the ratio printed: tracing only the template's own frames line by
line, the rest of the render pays one call-event check per Python call. CPU time (this
process's) and wall time, each the best of --repeat runs.

    .venv/bin/python bench/coverage.py [--config models.yaml] [--model NAME]... [--repeat N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from generator import reference  # noqa: E402
from generator.config import models  # noqa: E402
from generator.config.cases import model_cases  # noqa: E402
from generator.coverage import trace  # noqa: E402
from generator.sources.source import resolve  # noqa: E402


def timed(action) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    action()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=str(ROOT / "models.yaml"))
    parser.add_argument("--model", action="append", default=[])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    config = models.load(args.config)
    jobs = []
    for model in config.select(args.model):
        source = resolve(model, config)
        reference.render_request(source, model_cases(model)[0].request, config.date)  # loads it
        jobs.append((model, source, model_cases(model)))
    cases = sum(len(c) for _, _, c in jobs)

    def plain():
        for _, source, cs in jobs:
            for case in cs:
                reference.render_request(source, case.request, config.date)

    def traced():
        for model, source, _ in jobs:
            trace.model_coverage(model, source, config)

    best = {}
    for name, action in (("renders", plain), ("traced", traced)):
        runs = [timed(action) for _ in range(args.repeat)]
        best[name] = (min(r[0] for r in runs), min(r[1] for r in runs))
    print(f"{len(jobs)} models, {cases} cases, best of {args.repeat}")
    for name, (wall, cpu) in best.items():
        print(f"  {name:8s} wall {wall:6.2f} s  cpu {cpu:6.2f} s")
    print(f"  traced / renders: cpu x{best['traced'][1] / best['renders'][1]:.2f}, "
          f"wall x{best['traced'][0] / best['renders'][0]:.2f}")


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "coverage"))
