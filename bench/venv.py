"""How fast is a `transformers@V` venv made ready, through uv and through pip, against its floor?

Each run makes the venv as `goldens check --engine transformers@V` would (servers/venv.py: the
venv, the install with the index pip is configured with, the import check, given the bytecode an
earlier venv compiled for the same sources and compiling the rest on the other cores meanwhile),
in a fresh process with a fresh GOLDENS_CACHE, so nothing of an earlier run is reused but the
installer's own cache and what an earlier check of --version left in goldens' cache (the list of
what it imported, venv-imports/, and their bytecode under each source's sha256, venv-bytecode/):

- warm: --version again, the installer's cache as the user has it (a first, unreported run
  fills it);
- neighbour (--neighbour, default 5.20.1): another release in the installer's cache, after
  --version's check filled goldens' cache (a bisect's next venv: it shares most dependencies'
  files and some of its own);
- cold (--cold): --version with an empty installer cache (UV_CACHE_DIR / PIP_CACHE_DIR in a temp
  directory), so every wheel is downloaded.

The floor, measured in the same run on the venv each run made: the import check cannot end
before its import of what the worker uses, run once with that bytecode in place ("later", what
each later worker start pays), nor before the CPU of the first import, compiling included (the
check run again with its bytecode removed and none written), is spread over every core. uv
hard-links files from its cache, so copying the tree is no floor.
Wall and CPU time (this process's children) are printed; other processes on a shared machine
stretch wall time, so each figure is the best of --repeat runs.

    .venv/bin/python bench/venv.py [--version 5.20.2] [--neighbour 5.20.1] [--installer uv --installer pip]
                                   [--cold] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator import machine  # noqa: E402
from generator.servers import venv  # noqa: E402

from generator.engines.transformers.venv import CHECK  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) of one command, which must succeed."""
    wall, cpu = time.perf_counter(), children_cpu()
    result = subprocess.run(argv, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"bench: error: {' '.join(argv[:3])}...: {result.stderr.strip()[-500:]}")
    return time.perf_counter() - wall, children_cpu() - cpu


def make(version: str, installer: str, cache: Path, cold: Path | None) -> tuple[float, float]:
    """One venv made ready in a fresh process, as transformers@V does it."""
    env = {**os.environ, "GOLDENS_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    if installer == "pip":
        env["GOLDENS_UV"] = ""
    else:
        env.pop("GOLDENS_UV", None)
    if cold is not None:
        shutil.rmtree(cold, ignore_errors=True)
        env["UV_CACHE_DIR" if installer == "uv" else "PIP_CACHE_DIR"] = str(cold)
    script = f"from generator.engines.transformers.venv import transformers_python; transformers_python({version!r})"
    return timed([sys.executable, "-c", script], env)


def floor(made: Path) -> tuple[tuple[float, float], tuple[float, float]]:
    """(the first import, compiling included; a later one, from the bytecode the check wrote)."""
    later = timed([str(venv.python_in(made)), "-c", CHECK], dict(os.environ))
    with tempfile.TemporaryDirectory(prefix="goldens-bench-pyc-") as aside:
        moved = []
        for number, cache in enumerate(sorted(made.rglob("__pycache__"))):
            shutil.move(str(cache), Path(aside) / str(number))
            moved.append(cache)
        first = timed([str(venv.python_in(made)), "-c", CHECK], {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        for number, cache in enumerate(moved):
            shutil.move(Path(aside) / str(number), str(cache))
    return first, later


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="5.20.2", help="the Transformers release to install")
    parser.add_argument("--neighbour", default="5.20.1",
                        help="another release made after --version's venv ('' for none)")
    parser.add_argument("--installer", action="append", choices=("uv", "pip"), help="default: uv and pip")
    parser.add_argument("--cold", action="store_true", help="also with an empty installer cache")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    installers = args.installer or ["uv", "pip"]
    if "uv" in installers and venv.uv_binary() is None:
        print("bench: error: uv is not installed (pip install uv)", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="goldens-bench-venv-") as tmp:
        scratch = Path(tmp)
        for installer in installers:
            if args.neighbour:  # its wheels in the installer's cache; nothing of it in goldens' cache
                make(args.neighbour, installer, scratch / "fill", None)
                shutil.rmtree(scratch / "fill", ignore_errors=True)
            make(args.version, installer, scratch / "fill", None)  # fills the installer's own cache
            seen = scratch / f"{installer}-seen"  # and what that venv's check left in goldens' cache
            shutil.rmtree(seen, ignore_errors=True)
            seen.mkdir(parents=True)
            for kept in ("venv-imports", "venv-bytecode"):
                if (scratch / "fill" / kept).is_dir():
                    shutil.copytree(scratch / "fill" / kept, seen / kept)
            shutil.rmtree(scratch / "fill", ignore_errors=True)
            modes = [("warm", args.version, None)]
            modes += [("neighbour", args.neighbour, None)] if args.neighbour else []
            modes += [("cold", args.version, scratch / f"{installer}-cache")] if args.cold else []
            for mode, version, cold in modes:
                best = None
                for run in range(max(1, args.repeat)):
                    cache = scratch / f"{installer}-{mode}-{run}"
                    shutil.copytree(seen, cache)
                    figures = make(version, installer, cache, cold)
                    best = figures if best is None or figures[0] < best[0] else best
                    made = cache / f"transformers-{version}"
                    floor_figures = floor(made)
                    shutil.rmtree(cache, ignore_errors=True)
                rows.append((f"{installer}, {mode} {version}", best, floor_figures))
    print(f"transformers=={args.version} venv made ready ({machine.cores()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at the end); best of {args.repeat}")
    for label, (wall, cpu), ((first_wall, first_cpu), (later_wall, later_cpu)) in rows:
        # the check imports once, serially, what it compiles on every core: it cannot end before
        # that import with the bytecode in place, nor before the first import's CPU is spread
        floor_wall = max(later_wall, first_cpu / machine.cores())
        print(f"{label:22s} {wall:6.1f} s wall {cpu:6.1f} s CPU   floor {floor_wall:4.1f} s wall   "
              f"x{wall / floor_wall:.1f}   first import compiling on one core {first_wall:4.1f} s wall "
              f"{first_cpu:4.1f} s CPU   later starts {later_wall:4.1f} s wall")
    return 0


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "venv"))
