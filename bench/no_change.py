"""What a `goldens regenerate` with nothing changed costs, at today's matrix and at twice its goldens, against the interpreter's floor.

Issue 43: a run with nothing to render reads no golden, builds no case and compiles no template:
what it does per model and per golden is a stat or a memo hit, so its cost must not grow with
the matrix. Measured as the command a user types (a new process, `CI=1` as in CI), its CPU
(user + sys) read from the kernel for the child, the best of --repeat runs, each run's output
checked to be exactly one line, `0 written, N unchanged, 0 removed`. Two ways of starting:

- bytecode: as CI and users run it, the modules' bytecode cached (a first run writes it);
- compiled: the project's modules compiled from source on every run, as in a shell with
  PYTHONDONTWRITEBYTECODE=1 over a checkout that never wrote bytecode (a copy of generator/
  without __pycache__ put first on the path).

The floor, from the same run and started the same way: the interpreter doing nothing
(`python -c pass`), and the interpreter importing exactly the modules the no-change run imports
and doing nothing else. The doubled matrix is models.yaml with every model listed twice (the
second as `<name>-b`, its lock entries copied), its goldens the model's with the case renamed
and its index entry computed by the code a regenerate runs (index.inputs_and_cases), so the run
finds every model fresh (`double`: tests/test_no_change.py builds it the same way).

    .venv/bin/python bench/no_change.py [--config models.yaml] [--goldens goldens] [--repeat N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # runnable from a checkout without the editable install

from generator.errors import GoldensError  # noqa: E402

SUFFIX = "-b"
NEUTRAL = Path(tempfile.mkdtemp(prefix="goldens-bench-cwd-")) / "cwd"  # made empty by main
LOCKS = ("models.dialects.lock", "models.capabilities.lock")  # beside models.yaml (generator/locks.py)


def copy_matrix(config: Path, goldens: Path, into: Path) -> tuple[Path, Path]:
    """models.yaml, its locks and requests/ folder, and the goldens, copied under `into`:
    (the config, the goldens folder). The committed tree itself is never written."""
    into.mkdir(parents=True, exist_ok=True)
    for name in (config.name, *LOCKS):
        if (config.parent / name).is_file():
            shutil.copy2(config.parent / name, into / name)
    if (config.parent / "requests").is_dir():
        shutil.copytree(config.parent / "requests", into / "requests", symlinks=True)
    shutil.copytree(goldens, into / "goldens", symlinks=True)
    return into / config.name, into / "goldens"


def double(config: Path, goldens: Path, into: Path) -> tuple[Path, Path]:
    """The matrix with twice its goldens, copied under `into`: every model listed twice, the
    copy's lock entries, goldens and index entry made as a render would make them (the same
    bytes but the case; the inputs hashed by index.inputs_and_cases, as regenerate hashes them)."""
    import yaml

    from generator.config import dialects, models, polyfill
    from generator.goldens import golden_file, index, parse_goldens
    from generator.goldens import regenerate as regen
    from generator.goldens.render import provenance

    config, out = copy_matrix(config, goldens, into)
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    names = list(raw["models"])
    raw["models"].update({name + SUFFIX: raw["models"][name] for name in names})
    config.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True), encoding="utf-8")
    lock = dialects.read_lock(config)
    if lock:
        dialects.write_lock(config, {**lock, **{n + SUFFIX: lock[n] for n in names if n in lock}})
    entries = polyfill.load_lock(config)
    if entries:
        polyfill.write_lock(config, {**entries, **{n + SUFFIX: entries[n] for n in names if n in entries}})

    loaded = models.load(config)
    copies = loaded.select([name + SUFFIX for name in names])
    sources = regen.resolve_sources(loaded, copies)
    copies = regen.capabilities.refresh(loaded, copies, sources, full=False)
    copies = parse_goldens.refresh(loaded, copies, sources)
    copies = regen.choose_dialects(loaded, copies, sources)
    saved = index.load(out)
    code, versions = index.code_fingerprint(), index.library_versions()
    for model in copies:
        original = model.name[: -len(SUFFIX)]
        source = sources[model.name]
        inputs, case_ids = index.inputs_and_cases(model, source, loaded, provenance(source, loaded), code, versions)
        written = {}
        for case_id in case_ids:
            item = golden_file.read(golden_file.golden_path(out, original + case_id[len(model.name):]))
            text = golden_file.dumps(dataclasses.replace(item, case=case_id))
            path = golden_file.golden_path(out, case_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written[case_id] = text
        saved.record(model.name, inputs, written)
    index.save(out, saved)
    return config, out


def child_cpu(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    """(CPU seconds, user + sys, of the child process; its stdout, and its stderr after it).
    Started in a folder of its own (NEUTRAL), so the path's first entry is no checkout:
    PYTHONPATH says which one runs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # microseconds, not os.times' 10 ms ticks
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600, cwd=NEUTRAL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise GoldensError(f"{' '.join(args[:4])}... exited {result.returncode}: {result.stderr.strip()[-400:]}")
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, result.stdout + result.stderr)


def regenerate_args(config: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "generator.cli", "regenerate", "--config", str(config), "--goldens", str(out)]


IMPORTED = """\
import json, sys
from generator.cli import main
try:
    main([{args}], standalone_mode=False)
finally:
    print(json.dumps(sorted(sys.modules)))
"""


def imported_modules(config: Path, out: Path, env: dict[str, str]) -> list[str]:
    """The modules a no-change run has imported when it ends (asked of a run in a child)."""
    args = ", ".join(repr(a) for a in regenerate_args(config, out)[3:])
    _, printed = child_cpu([sys.executable, "-c", IMPORTED.format(args=args)], env)
    return json.loads(next(line for line in printed.splitlines() if line.startswith("[")))


def floor_script(names: list[str]) -> str:
    """Import each module the run imported (those a name can import: not __main__)."""
    wanted = [name for name in names if name not in ("__main__", "__mp_main__") and not name.startswith("_frozen")]
    return (f"import importlib\nfor name in {wanted!r}:\n    try:\n        importlib.import_module(name)\n"
            "    except Exception:\n        pass\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "models.yaml")
    parser.add_argument("--goldens", type=Path, default=ROOT / "goldens")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each; the best is reported")
    args = parser.parse_args(argv)
    repeat = max(1, args.repeat)
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    base.update(CI="1")
    try:
        with tempfile.TemporaryDirectory(prefix="goldens-bench-") as tmp:
            tmp = Path(tmp)
            matrices = {"today": copy_matrix(args.config.resolve(), args.goldens.resolve(), tmp / "today"),
                        "doubled": double(args.config.resolve(), args.goldens.resolve(), tmp / "doubled")}
            source = tmp / "source"  # the package without bytecode, for the compiled runs
            shutil.copytree(ROOT / "generator", source / "generator",
                            ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copytree(ROOT / "requests", source / "requests")  # derived.py reads the package's sibling
            NEUTRAL.mkdir()
            ways = {"bytecode": {**base, "PYTHONPATH": str(ROOT)},
                    "compiled": {**base, "PYTHONPATH": str(source), "PYTHONDONTWRITEBYTECODE": "1"}}
            counts, best = {}, {}
            for name, (config, out) in matrices.items():
                child_cpu(regenerate_args(config, out), ways["bytecode"])  # memos made, bytecode written
                from generator.config import models
                from generator.config.cases import all_cases
                counts[name] = sum(len(all_cases(m)) for m in models.load(config).models.values())
            modules = imported_modules(*matrices["today"], ways["bytecode"])
            floor = floor_script(modules)
            for way, env in ways.items():
                runs: dict[str, list[float]] = {"pass": [], "imports": [], "today": [], "doubled": []}
                for _ in range(repeat):
                    runs["pass"].append(child_cpu([sys.executable, "-c", "pass"], env)[0])
                    runs["imports"].append(child_cpu([sys.executable, "-c", floor], env)[0])
                    for name, (config, out) in matrices.items():
                        cpu, stdout = child_cpu(regenerate_args(config, out), env)
                        expected = [f"0 written, {counts[name]} unchanged, 0 removed"]
                        if stdout.splitlines() != expected:  # one line, on stdout and stderr together
                            raise GoldensError(f"{name}: a no-change run printed {stdout.splitlines()[:3]!r}, "
                                               f"not {expected!r}")
                        runs[name].append(cpu)
                best[way] = {key: min(values) for key, values in runs.items()}
    except GoldensError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return 2

    print(f"today: {counts['today']} goldens; doubled: {counts['doubled']} goldens (every model twice); "
          f"{len(modules)} modules imported; best of {repeat} runs, CPU user+sys of the child")
    print(f"{'':28s} {'bytecode':>10s} {'compiled':>10s}")
    rows = [("python -c pass", "pass"), ("the run's imports only", "imports"),
            ("no change, today", "today"), ("no change, doubled", "doubled")]
    for label, key in rows:
        print(f"{label:28s} {best['bytecode'][key]:8.3f} s {best['compiled'][key]:8.3f} s")
    for way in ("bytecode", "compiled"):
        b = best[way]
        print(f"{way}: beyond the imports floor {b['today'] - b['imports']:.3f} s today, "
              f"{b['doubled'] - b['imports']:.3f} s doubled; doubled / today x{b['doubled'] / b['today']:.2f}; "
              f"today / imports floor x{b['today'] / b['imports']:.2f}")
    return 0


if __name__ == "__main__":
    import benchpage  # bench/ is this script's folder: sys.path[0]

    sys.exit(benchpage.run(main, "no_change"))
