"""`python -m generator.engines.prepare ENGINE VERSION`: make ready, in a process of its own, what
every managed server of an engine's version needs whatever the model (its version line's
`ready`: llama.cpp's build, vLLM's venv). `goldens check` starts it beside its first cases
(EnginePool.prepare); its lines are the work's own progress. It says nothing of a failure: the
server's start, which takes the same lock, meets the same problem and says it in one line."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from generator.config import engine_registry

    engine, version = argv
    try:
        engine_registry.version_line(engine_registry.lookup(engine)).ready(version)
    except Exception:  # noqa: BLE001 - told by the start that needs it, once, in one line
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
