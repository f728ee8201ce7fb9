"""How close is `goldens regenerate` to its floor, and how cheap is a run with nothing changed?

The floor is what a regenerate that renders cannot avoid: loading every model's tokenizer, one
after the other, in this process (after Transformers is imported; its import is timed and
reported on its own). Resolving sources is timed beside it, not in it. Against that floor, from
the same run:

- the full regenerate into an empty directory, in one process and with one worker process per
  core (what `goldens regenerate` does), and `goldens regenerate --force` as a command (a new
  process: its imports and its fork server's start included; it writes nothing);
- the no-change regenerate over what the full run wrote, in this process (with the number of
  tokenizers it loaded, which must be 0) and as the `goldens regenerate` command a user types.

Wall time and CPU time are both printed: other processes on a shared machine stretch wall time,
while CPU time says what the work costs (a worker run's CPU is its workers' and the fork
server's, read from /proc: Linux only). The ratios are taken within one run, each figure the best of
--repeat runs.

    .venv/bin/python bench/regenerate.py [--config models.yaml] [--model NAME]... [--repeat N]
"""

from __future__ import annotations

import argparse
import multiprocessing.forkserver
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator import machine, reference  # noqa: E402
from generator.config import models  # noqa: E402
from generator.config.cases import matrix  # noqa: E402
from generator.errors import GoldensError  # noqa: E402
from generator.goldens import regenerate as regen  # noqa: E402
from generator.sources.source import resolve  # noqa: E402


def fork_server_cpu() -> float:
    """CPU seconds of the fork server and of the workers it has reaped (0 before it starts)."""
    pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def timed(function):
    """(wall seconds, CPU seconds of this process and of worker processes, result)."""
    wall, cpu, workers = time.perf_counter(), time.process_time(), fork_server_cpu()
    result = function()
    wall = time.perf_counter() - wall
    time.sleep(0.2)  # the fork server reaps its last worker on SIGCHLD
    return wall, time.process_time() - cpu + fork_server_cpu() - workers, result


def import_transformers() -> None:
    """What every run pays once, before any figure: Transformers and its tokenizer classes."""
    reference._quiet_transformers()
    from transformers import AutoTokenizer  # noqa: F401


def floor(config: models.Config, names: tuple[str, ...]) -> tuple[tuple[float, float], tuple[float, float]]:
    """((wall, CPU) resolving sources, (wall, CPU) loading tokenizers): only the second is the floor."""
    reference.load_tokenizer.cache_clear()
    resolving, loading = [0.0, 0.0], [0.0, 0.0]
    for model in config.select(names):
        wall, cpu, source = timed(lambda: resolve(model, config))
        resolving[0] += wall
        resolving[1] += cpu
        wall, cpu, _ = timed(lambda: reference.load_tokenizer(source.tokenizer_dir))
        loading[0] += wall
        loading[1] += cpu
    return tuple(resolving), tuple(loading)


def full(config: models.Config, names: tuple[str, ...], out: Path, workers: int | None) -> regen.Summary:
    """A complete regenerate into an empty directory (the tokenizer cache cleared first)."""
    reference.load_tokenizer.cache_clear()
    for path in sorted(out.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    return regen.regenerate(config, out, names, workers=workers)


def no_change(config: models.Config, names: tuple[str, ...], out: Path) -> tuple[regen.Summary, int]:
    """A regenerate over a complete directory: (summary, tokenizers it loaded). In this
    process (workers=1), so a load would be seen."""
    reference.load_tokenizer.cache_clear()
    summary = regen.regenerate(config, out, names, workers=1)
    return summary, reference.load_tokenizer.cache_info().misses


def command(config_path: Path, names: tuple[str, ...], out: Path, *flags: str) -> tuple[float, str]:
    """`goldens regenerate` as a user runs it: a new Python process, its imports (and its fork
    server's) included. Returns (its CPU seconds and its children's, its summary line)."""
    args = [sys.executable, "-m", "generator.cli", "regenerate", "--config", str(config_path), "--out", str(out),
            *flags]
    for name in names:
        args += ["--model", name]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "1"}
    before = os.times()
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    after = os.times()
    if result.returncode != 0:
        raise GoldensError(f"goldens regenerate exited {result.returncode}: {result.stderr.strip()[-300:]}")
    cpu = after.children_user - before.children_user + after.children_system - before.children_system
    return cpu, result.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "models.yaml")
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase; the best is reported")
    args = parser.parse_args(argv)
    names = tuple(args.model)
    cores = machine.cores()

    runs: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("resolve", "floor", "full1", "fullN", "forced", "same", "cmd")}
    try:
        config = models.load(args.config)
        cases = len(matrix(config, names))
        import_seconds = timed(import_transformers)[0]
        with tempfile.TemporaryDirectory(prefix="goldens-bench-") as tmp:
            out = Path(tmp)
            for _ in range(max(1, args.repeat)):
                resolving, loading = floor(config, names)
                runs["resolve"].append(resolving)
                runs["floor"].append(loading)
                wall, cpu, full_summary = timed(lambda: full(config, names, out, workers=1))
                runs["full1"].append((wall, cpu))
                wall, cpu, _ = timed(lambda: full(config, names, out, workers=cores))
                runs["fullN"].append((wall, cpu))
                wall, _, (_, forced_summary) = timed(lambda: command(args.config, names, out, "--force"))
                runs["forced"].append((wall, float("nan")))  # its workers are not its children
                wall, cpu, (same_summary, loaded) = timed(lambda: no_change(config, names, out))
                runs["same"].append((wall, cpu))
                wall, _, (cpu, command_summary) = timed(lambda: command(args.config, names, out))
                runs["cmd"].append((wall, cpu))
    except GoldensError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return 2

    wall = {key: min(w for w, _ in values) for key, values in runs.items()}
    cpu = {key: min(c for _, c in values) for key, values in runs.items()}

    def row(label: str, key: str, note: str = "") -> None:
        walls = ", ".join(f"{w:.2f}" for w, _ in runs[key])
        used = "    n/a  " if cpu[key] != cpu[key] else f"{cpu[key]:7.2f} s"
        print(f"{label:24s} {wall[key]:7.2f} s wall  {used} CPU  (wall of each run: {walls}){note}")

    models_count = len(config.select(names))
    print(f"config: {args.config} ({models_count} models, {cases} cases); {cores} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the end; best of {max(1, args.repeat)} runs")
    print(f"transformers import:     {import_seconds:7.2f} s wall  (once, in no figure)")
    row("resolve sources", "resolve", "  not in the floor")
    row("floor: load tokenizers", "floor", f"  {models_count}, one after the other")
    row("full, 1 process", "full1", f"  {full_summary}")
    row(f"full, {cores} workers", "fullN")
    row("full, command --force", "forced", f"  {forced_summary}; imports included")
    row("no change, in process", "same", f"  {same_summary}; {loaded} tokenizers loaded")
    row("no change, command", "cmd", f"  {command_summary}")
    print(f"full / floor:            {wall['full1'] / wall['floor']:5.2f}x wall, {cpu['full1'] / cpu['floor']:.2f}x CPU "
          f"(1 process); {wall['fullN'] / wall['floor']:.2f}x wall, {cpu['fullN'] / cpu['floor']:.2f}x CPU ({cores} workers); "
          f"{wall['forced'] / wall['floor']:.2f}x wall (command --force)")
    print(f"no change / floor:       {wall['cmd'] / wall['floor']:5.2f}x wall, {cpu['cmd'] / cpu['floor']:.2f}x CPU (command); "
          f"{wall['same'] / wall['floor']:.2f}x wall (in process)")
    return 0


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "regenerate"))
