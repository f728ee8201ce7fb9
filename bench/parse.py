"""What does the output side cost against the render side, on the same engines?

For each engine that parses (goldens engines --matrix, the second table), replays the render
goldens and then the parse goldens (every chunk plan) of the models it parses, through one
engine pool: its servers start once and are lent to both runs, so each figure is replay work
alone. Wall time is stretched by other processes on a shared machine; CPU (user + sys of this
process and of the servers and workers it started) is what the work costs here. The
issue's bound: the parse matrix costs at most twice the render matrix on the same engines.

    .venv/bin/python bench/parse.py [--engine NAME]... [--model NAME]...
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.config import engine_matrix, engine_registry, models  # noqa: E402
from generator.engines.pool import EnginePool  # noqa: E402
from generator.replay.running import check  # noqa: E402
from generator.sources.source import resolve  # noqa: E402


def cpu() -> float:
    """CPU seconds (user + sys) of this process and every live descendant: the servers and
    workers the pool started do the engines' work."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
            except (OSError, IndexError, ValueError):
                continue
    mine, total, grew = {os.getpid()}, 0.0, True
    while grew:
        grew = False
        for pid, (parent, _) in stats.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                grew = True
    usage = resource.getrusage(resource.RUSAGE_SELF)
    total = usage.ru_utime + usage.ru_stime
    return total + sum(stats[pid][1] for pid in mine if pid != os.getpid() and pid in stats)


def timed(config, engine: str, names: list[str], axis: str, pool: EnginePool) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, cases judged) of one check over `names` on one axis."""
    wall, used = time.monotonic(), cpu()
    results = check.run(config, ROOT / "goldens", engines=(engine,), models=tuple(names), pool=pool, axis=axis)
    outcomes = [o for o in results.outcomes if o.stand_in is None and o.engine == engine]
    return time.monotonic() - wall, cpu() - used, len(outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", action="append", default=[], help="an engine that parses (default: every one)")
    parser.add_argument("--model", action="append", default=[], help="only this model (default: every one it parses)")
    args = parser.parse_args()
    config = models.load(ROOT / "models.yaml")
    cells = [c for c in engine_matrix.parse_matrix(config) if c.replayed]
    engines = args.engine or list(dict.fromkeys(c.engine for c in cells))
    print(f"{os.cpu_count()} cores; render = `check --axis render`, parse = `check --axis parse` (every plan), "
          "servers started once per engine and model, before timing")
    print(f"{'engine':<14} {'models':>6} {'render cases':>12} {'render CPU s':>12} {'parse cases':>11} "
          f"{'parse CPU s':>11} {'parse/render CPU':>16} {'wall render/parse s':>20}")
    total = {"render": 0.0, "parse": 0.0}
    with EnginePool(config.date, versions=config.engine_versions) as pool:
        for engine in engines:
            names = [c.model for c in cells if c.engine == engine and (not args.model or c.model in args.model)]
            if not names:
                continue
            renders = engine_registry.capabilities(engine).renders
            rw = rc = pw = pc = 0.0
            rn = pn = 0
            for name in names:  # per model: its server started before timing, then released (vLLM's 3.5 GB)
                model = config.models[name]
                pool.engine(engine, model, resolve(model, config))
                if renders:
                    w, c, n = timed(config, engine, [name], "render", pool)
                    rw, rc, rn = rw + w, rc + c, rn + n
                w, c, n = timed(config, engine, [name], "parse", pool)
                pw, pc, pn = pw + w, pc + c, pn + n
                pool.release(name)
            total["render"] += rc
            total["parse"] += pc
            ratio = f"{pc / rc:.2f}" if rc else "parse only"
            print(f"{engine:<14} {len(names):>6} {rn:>12} {rc:>12.1f} {pn:>11} {pc:>11.1f} {ratio:>16} "
                  f"{rw:>9.1f} / {pw:<8.1f}")
    if total["render"]:
        print(f"all engines: parse CPU {total['parse']:.1f} s against render CPU {total['render']:.1f} s "
              f"({total['parse'] / total['render']:.2f}x; a parse-only engine's parse counted, its render 0)")


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "parse"))
