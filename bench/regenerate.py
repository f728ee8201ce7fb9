"""How close is `goldens regenerate` to its floor?

The floor is what no regenerate can avoid: resolving every model's sources and loading its
tokenizer. Everything above that (building the cases, rendering, decoding pieces, writing the
goldens) is the overhead this benchmark keeps honest. Both phases run in this process, after
Transformers is imported (its import is timed and reported on its own), and the tokenizer cache
is cleared before each run so the full regenerate pays for its tokenizers too.

    .venv/bin/python bench/regenerate.py [--config models.yaml] [--model NAME]... [--repeat N]
"""

from __future__ import annotations

import argparse
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
    """What every run pays once, before either figure: Transformers and its tokenizer classes."""
    reference._quiet_transformers()
    from transformers import AutoTokenizer  # noqa: F401


def floor(config: models.Config, names: tuple[str, ...]) -> None:
    """Resolve every selected model's sources and load its tokenizer, nothing else."""
    reference.load_tokenizer.cache_clear()
    for model in config.select(names):
        source = resolve(model, config)
        reference.load_tokenizer(source.tokenizer_dir)


def full(config: models.Config, names: tuple[str, ...]) -> regen.Summary:
    """A complete regenerate into an empty temporary directory."""
    reference.load_tokenizer.cache_clear()
    with tempfile.TemporaryDirectory(prefix="goldens-bench-") as out:
        return regen.regenerate(config, Path(out), names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "models.yaml")
    parser.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each phase; the best is reported")
    args = parser.parse_args(argv)
    names = tuple(args.model)

    try:
        config = models.load(args.config)
        cases = len(matrix(config, names))
        import_seconds, _ = timed(import_transformers)
        # The full run checks pins (never rewrites them), exactly as a plain regenerate does.
        floors, fulls, summary = [], [], None
        for _ in range(max(1, args.repeat)):
            floors.append(timed(lambda: floor(config, names))[0])
            seconds, summary = timed(lambda: full(config, names))
            fulls.append(seconds)
    except GoldensError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return 2

    best_floor, best_full = min(floors), min(fulls)
    models_count = len(config.select(names))
    runs = lambda values: ", ".join(f"{s:.3f}" for s in values)  # noqa: E731
    print(f"config:               {args.config} ({models_count} models, {cases} cases)")
    print(f"transformers import:  {import_seconds:7.3f} s  (once, in neither figure)")
    print(f"floor:                {best_floor:7.3f} s  resolve sources + load tokenizers; "
          f"best of {len(floors)}: {runs(floors)}")
    print(f"full regenerate:      {best_full:7.3f} s  best of {len(fulls)}: {runs(fulls)}  ({summary})")
    print(f"above the floor:      {best_full - best_floor:7.3f} s  "
          f"({(best_full - best_floor) / max(cases, 1) * 1000:.1f} ms per case)")
    print(f"ratio full / floor:   {best_full / best_floor:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
