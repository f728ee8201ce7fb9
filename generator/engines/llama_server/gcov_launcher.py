"""The compiler launcher of llama.cpp's coverage build (generator/engines/llama_server/coverage.py).

Called by the build as `python gcov_launcher.py SOURCES [ccache] compiler args...`: a compile of
one of SOURCES (comma-separated paths relative to the source tree) gets `--coverage -O0` and
skips ccache (a cached .gcno would name another tree's paths); every other compile runs exactly
as in the normal build, so ccache serves it the normal build's object. Standard library only:
it runs for each of the build's ~200 compiles."""

import os
import sys


def main(argv: list[str]) -> int:
    sources = [s for s in argv[0].split(",") if s]
    command = argv[1:]
    compiled = command[command.index("-c") + 1] if "-c" in command else ""
    if any(compiled.replace(os.sep, "/").endswith("/" + source) for source in sources):
        if os.path.basename(command[0]) == "ccache":
            command = command[1:]
        command = [*command, "--coverage", "-O0"]
    os.execvp(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
