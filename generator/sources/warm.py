"""`python -m generator.sources.warm [CONFIG]`: download what the matrix's sources read (each
model's tokenizer and template, the pinned llama.cpp source with its templates and vocabularies,
harmony's o200k vocabulary, every known encoder reference's module) into the cache, nothing else: no server, build or venv.

The fast tier (`make test-fast`, GOLDENS_LIGHT=1) refuses downloads, so on a fresh machine it
needs these first; `make sources` runs this, and CI runs it before the fast tier."""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from generator.config import models
    from generator.errors import GoldensError
    from generator.sources import encoders, pack, tiktoken_ranks
    from generator.sources.source import resolve

    config = models.load(Path(argv[0]) if argv else Path("models.yaml"))
    try:
        for model in config.models.values():
            resolve(model, config)
        pack.llama_cpp_source()
        tiktoken_ranks.o200k_base_dir()
        for encoder in encoders.ENCODERS.values():  # the tests' own configs declare them too
            encoders.fetch(encoder)
    except GoldensError as error:
        print(f"goldens: error: {error}", file=sys.stderr)
        return 2
    print(f"sources ready: {len(config.models)} models, the llama.cpp source, harmony's vocabulary, {len(encoders.ENCODERS)} encoder(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
