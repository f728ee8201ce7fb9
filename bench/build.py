"""How fast is a llama.cpp release built, against what this machine allows?

The release's source is unpacked once (its published sdist, or the pack for the pinned build,
as build_llama_server does) into a temporary GOLDENS_CACHE, in the layout every build uses, so
the machine's compiler cache matches it. Then the build goldens runs (llama_cpp.build_commands:
configure, then only the llama-server target on every usable core) runs into a fresh build tree:

- from ccache: the machine's compiler cache (after an earlier build of this release or a
  neighbour, most compiles are hits);
- cold (--cold): an empty compiler cache in a temporary directory, so every object compiles.

Each row gives wall and CPU time of the build's processes for the two steps, and the compile's
floor: its own CPU time spread over the usable cores (no build on these cores finishes sooner
than its compile work allows; a build held to fewer jobs shows as wall far above it).

    .venv/bin/python bench/build.py [--build 11434] [--cold] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator.files import cache_dir  # noqa: E402
from generator.engines.llama_server import llama_cpp  # noqa: E402
from generator.sources import pack  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_step(step: list[str], log: Path, env: dict[str, str], label: str, compile_: bool) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), children_cpu()
    llama_cpp.run_build([step], log, env, label, configure_first=not compile_)
    return time.perf_counter() - wall, children_cpu() - cpu


def build_once(build: int, source: Path, ccache: Path) -> dict[str, float | str]:
    """One configure + compile into a fresh tree, through the compiler cache at `ccache`."""
    root = source.parent
    work = root / "build"
    shutil.rmtree(work, ignore_errors=True)
    stats = root / "ccache.stats"
    stats.unlink(missing_ok=True)
    os.environ["CCACHE_DIR"] = str(ccache)
    launcher, env = llama_cpp._compiler_cache(stats)
    if not launcher:
        raise SystemExit("bench: error: ccache is not installed (the build bench measures builds through it)")
    configure, compile_ = llama_cpp.build_commands(source, work, build, launcher)
    log = root / "build.log"
    label = f"bench build b{build}"
    configure_wall, configure_cpu = timed_step(configure, log, env, label, compile_=False)
    compile_wall, compile_cpu = timed_step(compile_, log, env, label, compile_=True)
    if not (work / "bin" / "llama-server").is_file():
        raise SystemExit(f"bench: error: the build made no llama-server (log {log})")
    return {"configure": configure_wall, "configure_cpu": configure_cpu, "compile": compile_wall,
            "compile_cpu": compile_cpu, "jobs": compile_[compile_.index("--parallel") + 1],
            "cache": llama_cpp._cache_served(stats)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=int, default=pack.LLAMA_CPP_BUILD, help="the llama.cpp build number")
    parser.add_argument("--cold", action="store_true", help="also with an empty compiler cache")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    if shutil.which("cmake") is None or shutil.which("ccache") is None:
        print("bench: error: cmake and ccache are needed", file=sys.stderr)
        return 2
    machine_ccache = Path(os.environ.get("CCACHE_DIR") or cache_dir() / "ccache")
    cores = len(os.sched_getaffinity(0))
    rows = []
    with tempfile.TemporaryDirectory(prefix="goldens-bench-build-") as tmp:
        machine_pack = cache_dir() / "pack"
        os.environ["GOLDENS_CACHE"] = str(Path(tmp) / "cache")
        if machine_pack.is_dir():  # the pinned build's source comes from the pack, fetched once a machine
            cache_dir().joinpath("pack").symlink_to(machine_pack, target_is_directory=True)
        source = cache_dir() / "llama.cpp" / f"b{args.build}" / "src"
        started = time.perf_counter()
        llama_cpp._unpack_source(args.build, source)
        unpacked = time.perf_counter() - started
        modes = [("from ccache", None)] + ([("cold", Path(tmp) / "empty-ccache")] if args.cold else [])
        for mode, empty in modes:
            best = None
            for run in range(max(1, args.repeat)):
                ccache = machine_ccache
                if empty is not None:
                    ccache = empty.with_name(f"{empty.name}-{run}")
                    ccache.mkdir(parents=True)
                figures = build_once(args.build, source, ccache)
                best = figures if best is None or figures["compile"] < best["compile"] else best
                if empty is not None:
                    shutil.rmtree(ccache, ignore_errors=True)
            rows.append((mode, best))
    print(f"llama.cpp b{args.build}, llama-server target ({cores} usable cores, load average "
          f"{os.getloadavg()[0]:.1f} at the end); source unpacked in {unpacked:.1f} s; best of {args.repeat}")
    for mode, f in rows:
        floor = f["compile_cpu"] / cores
        print(f"{mode:12s} configure {f['configure']:6.1f} s wall {f['configure_cpu']:6.1f} s CPU   "
              f"compile ({f['jobs']} jobs) {f['compile']:7.1f} s wall {f['compile_cpu']:7.1f} s CPU   "
              f"floor (CPU / cores) {floor:7.1f} s   compile / floor: x{f['compile'] / max(floor, 1e-9):.2f}   "
              f"{f['cache']}")
    return 0


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "build"))
