"""How close is `goldens regenerate` to its floor, and how cheap is a run with nothing changed?

The floor is what a regenerate that renders cannot avoid: loading every model's tokenizer, one
after the other, in this process (after Transformers is imported; its import is timed and
reported on its own). Resolving sources is timed beside it, not in it. Against that floor, from
the same run:

- the full regenerate into an empty directory, in one process and with one worker per core;
- the no-change regenerate over what the full run wrote, in this process (with the number of
  tokenizers it loaded, which must be 0) and as the `goldens regenerate` command a user types.

Other processes on the machine slow every phase; the ratios are taken within one run, and each
figure is the best of --repeat runs.

    .venv/bin/python bench/regenerate.py [--config models.yaml] [--model NAME]... [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator import reference  # noqa: E402
from generator.config import models  # noqa: E402
from generator.config.cases import matrix  # noqa: E402
from generator.errors import GoldensError  # noqa: E402
from generator.goldens import regenerate as regen  # noqa: E402
from generator.sources.source import resolve  # noqa: E402


def timed(function):
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def import_transformers() -> None:
    """What every run pays once, before any figure: Transformers and its tokenizer classes."""
    reference._quiet_transformers()
    from transformers import AutoTokenizer  # noqa: F401


def floor(config: models.Config, names: tuple[str, ...]) -> tuple[float, float]:
    """(seconds resolving sources, seconds loading tokenizers): only the second is the floor."""
    reference.load_tokenizer.cache_clear()
    resolving = loading = 0.0
    for model in config.select(names):
        seconds, source = timed(lambda: resolve(model, config))
        resolving += seconds
        loading += timed(lambda: reference.load_tokenizer(source.tokenizer_dir))[0]
    return resolving, loading


def full(config: models.Config, names: tuple[str, ...], out: Path, workers: int | None) -> regen.Summary:
    """A complete regenerate into an empty directory (the tokenizer cache cleared first)."""
    reference.load_tokenizer.cache_clear()
    for path in sorted(out.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    return regen.regenerate(config, out, names, workers=workers)


def no_change(config: models.Config, names: tuple[str, ...], out: Path) -> tuple[regen.Summary, int]:
    """A regenerate over a complete directory: (summary, tokenizers it loaded)."""
    reference.load_tokenizer.cache_clear()
    summary = regen.regenerate(config, out, names)
    return summary, reference.load_tokenizer.cache_info().misses


def command(config_path: Path, names: tuple[str, ...], out: Path) -> str:
    """`goldens regenerate` as a user runs it: a new Python process, its imports included."""
    args = [sys.executable, "-m", "generator.cli", "regenerate", "--config", str(config_path), "--out", str(out)]
    for name in names:
        args += ["--model", name]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "1"}
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0:
        raise GoldensError(f"goldens regenerate exited {result.returncode}: {result.stderr.strip()[-300:]}")
    return result.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "models.yaml")
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase; the best is reported")
    args = parser.parse_args(argv)
    names = tuple(args.model)
    cores = len(os.sched_getaffinity(0))

    figures: dict[str, list[float]] = {k: [] for k in ("resolve", "floor", "full1", "fullN", "same", "cmd")}
    try:
        config = models.load(args.config)
        cases = len(matrix(config, names))
        import_seconds, _ = timed(import_transformers)
        with tempfile.TemporaryDirectory(prefix="goldens-bench-") as tmp:
            out = Path(tmp)
            for _ in range(max(1, args.repeat)):
                resolving, loading = floor(config, names)
                figures["resolve"].append(resolving)
                figures["floor"].append(loading)
                seconds, full_summary = timed(lambda: full(config, names, out, workers=1))
                figures["full1"].append(seconds)
                seconds, full_summary = timed(lambda: full(config, names, out, workers=None))
                figures["fullN"].append(seconds)
                seconds, (same_summary, loaded) = timed(lambda: no_change(config, names, out))
                figures["same"].append(seconds)
                seconds, command_summary = timed(lambda: command(args.config, names, out))
                figures["cmd"].append(seconds)
    except GoldensError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return 2

    best = {key: min(values) for key, values in figures.items()}
    runs = lambda key: ", ".join(f"{s:.3f}" for s in figures[key])  # noqa: E731
    models_count = len(config.select(names))
    print(f"config:                 {args.config} ({models_count} models, {cases} cases), {cores} cores, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"transformers import:    {import_seconds:7.3f} s  (once, in no figure)")
    print(f"resolve sources:        {best['resolve']:7.3f} s  (not in the floor) best of: {runs('resolve')}")
    print(f"floor:                  {best['floor']:7.3f} s  load {models_count} tokenizers, one by one; "
          f"best of: {runs('floor')}")
    print(f"full, 1 process:        {best['full1']:7.3f} s  best of: {runs('full1')}  ({full_summary})")
    print(f"full, {cores} workers:        {best['fullN']:7.3f} s  best of: {runs('fullN')}")
    print(f"no change, in process:  {best['same']:7.3f} s  best of: {runs('same')}  "
          f"({same_summary}; {loaded} tokenizers loaded)")
    print(f"no change, command:     {best['cmd']:7.3f} s  best of: {runs('cmd')}  ({command_summary})")
    full_best = min(best["full1"], best["fullN"])
    print(f"above the floor:        {full_best - best['floor']:7.3f} s  "
          f"({(full_best - best['floor']) / max(cases, 1) * 1000:.1f} ms per case, the faster full run)")
    print(f"ratio full / floor:     {best['full1'] / best['floor']:7.2f}x one process, "
          f"{best['fullN'] / best['floor']:.2f}x {cores} workers")
    print(f"ratio no change / floor:{best['cmd'] / best['floor']:7.2f}x (command), "
          f"{best['same'] / best['floor']:.2f}x (in process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
