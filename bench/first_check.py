"""How long does a first `goldens check` take on a machine with nothing cached, against its build?

`goldens check` runs in a fresh process with an empty GOLDENS_CACHE, as on a new machine: it
fetches the pinned pack, builds the tokenizers, builds llama-server from the pinned llama.cpp
source and replays the model's goldens through the engines named. The compiler cache is the
machine's (with ccache installed and warm, as after one earlier build) or, with --no-ccache,
an empty one (a new machine that has ccache installed).

The floor is what the run cannot go below. The build runs in the background from the run's start
(EnginePool.prepare), beside the cases that need no server, so the floor is the llama.cpp build
it made (the build's own seconds, from the build.json the run left) plus what must follow it:
the llama-server groups of the same check run again in the now-warm cache (their seconds from
its --results, the server's start included); and never less than that warm check as a whole.
A first run bounded by its build sits near x1.0.

    .venv/bin/python bench/first_check.py [--model qwen3] [--engine llama-server]... [--no-ccache]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from generator import machine  # noqa: E402
from generator.config import engine_registry, engine_spec  # noqa: E402
from generator.files import cache_dir  # noqa: E402
from generator.sources import pack  # noqa: E402


def check(args: argparse.Namespace, env: dict[str, str], *extra: str) -> tuple[float, str]:
    """(seconds, what the check printed on stderr)."""
    argv = [sys.executable, "-m", "generator.cli", "check", "--config", str(ROOT / "models.yaml"),
            "--model", args.model, *[f"--engine={engine}" for engine in args.engine], *extra]
    started = time.perf_counter()
    result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"bench: error: goldens check exited {result.returncode}: {result.stderr.strip()[-2000:]}")
    return seconds, result.stderr


def _needs_the_build(label: str) -> bool:
    """A group replayed through a llama.cpp binary (llama-server, client-completion)."""
    server = engine_registry.lookup(engine_spec.parse(label).name).server
    return server is not None and server.kind == "llama-server"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--engine", action="append", help="default: transformers, minijinja, llama-server")
    parser.add_argument("--no-ccache", action="store_true", help="an empty compiler cache (every object compiles)")
    args = parser.parse_args(argv)
    args.engine = args.engine or ["transformers", "minijinja", "llama-server"]
    machine_ccache = os.environ.get("CCACHE_DIR") or str(cache_dir() / "ccache")
    with tempfile.TemporaryDirectory(prefix="goldens-bench-first-") as tmp:
        env = {**os.environ, "GOLDENS_CACHE": str(Path(tmp) / "cache"),
               "CCACHE_DIR": str(Path(tmp) / "ccache") if args.no_ccache else machine_ccache}
        env.pop("GOLDENS_BUILD_JOBS", None)
        first, said = check(args, env)
        label = f"building llama-server b{pack.LLAMA_CPP_BUILD}"
        if said.count(f"{label}: started") != 1:
            raise SystemExit(f"bench: error: the first check did not build llama-server once: {said[-2000:]}")
        how = ("started in the background at the run's start"
               if f"making ready in the background: llama-server b{pack.LLAMA_CPP_BUILD}" in said
               else "built when its server started")
        record = Path(tmp) / "cache" / "llama.cpp" / f"b{pack.LLAMA_CPP_BUILD}" / "build.json"
        built = json.loads(record.read_text()) if record.is_file() else {"seconds": 0.0, "compiler_cache": "no build"}
        results = Path(tmp) / "warm.json"
        again, _ = check(args, env, "--results", str(results))
        after_build = sum(group["seconds"] for group in json.loads(results.read_text())["groups"]
                          if _needs_the_build(group["engine"]))
    floor = max(again, built["seconds"] + after_build)
    print(f"first goldens check, {args.model} on {', '.join(args.engine)} ({machine.cores()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at the end), "
          + ("an empty compiler cache" if args.no_ccache else "the machine's compiler cache"))
    print(f"first run {first:7.1f} s   its llama.cpp build {built['seconds']:7.1f} s ({built['compiler_cache']}; "
          f"{how})   "
          f"the same check warm {again:5.1f} s ({after_build:.1f} s of it on llama-server)   floor {floor:7.1f} s   "
          f"first / floor: x{first / floor:.2f}")
    return 0


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "first_check"))
