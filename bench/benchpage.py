"""docs/benchmarks.md, written by the bench scripts themselves: no figure on it is copied by hand.

Every bench script ends with `sys.exit(benchpage.run(main, NAME))`. Given `--page PATH` (which
`make bench` passes: docs/benchmarks.md), the script's printed output is shown as usual and also
kept, and when the script succeeds its own section of the page is replaced by that output, under
a line saying the command, the date, the machine's cores and its load average before and after.
The other sections are kept as they are, so one script can be run on its own to refresh its
figures. Without `--page` nothing is written (tests/test_bench.py smoke-runs the scripts so).

    .venv/bin/python bench/coverage.py --model qwen3 --page docs/benchmarks.md
"""

from __future__ import annotations

import datetime
import io
import os
import platform
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"

# The page's sections in their order: each bench script's name (bench/NAME.py) and its title.
SECTIONS = {
    "regenerate": "goldens regenerate against its floor",
    "no_change": "A no-change goldens regenerate, at the matrix and at twice its goldens",
    "replay": "Replay throughput against llama-server's capacity",
    "venv": "Making a Transformers venv ready",
    "build": "Building llama-server",
    "first_check": "A first goldens check on an empty cache",
    "coverage": "Template coverage's cost",
    "bisection": "goldens bisect against its floor",
    "history": "goldens history against its floor",
    "vllm_render": "vLLM's render server beside its serving server",
    "parse": "The output side against the render side",
    "shards": "What a shard costs",
}

HEADER = """# Benchmarks

Written by `make bench` (`bench/benchpage.py`): each section is the output of one script in
`bench/` from its last run with `--page docs/benchmarks.md`, with the command, the date and the
machine it ran on. Do not edit this page by hand; run the script again. Every figure is measured
against the floor of the same run (what the work cannot avoid), so a busy machine stretches both
alike. `tests/test_bench.py` runs every script at a small size, without writing here.
"""

NOT_YET = "Not measured yet: `make bench` (or the script with `--page`) writes it."


def begin(name: str) -> str:
    return f"<!-- bench:{name} -->"


def end(name: str) -> str:
    return f"<!-- /bench:{name} -->"


class Tee(io.TextIOBase):
    """Writes to the real stream and keeps a copy."""

    def __init__(self, stream):
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.kept.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def purpose(script: Path) -> str:
    """The first paragraph of the script's docstring, on one line."""
    text = script.read_text(encoding="utf-8")
    match = re.match(r'\s*"""(.*?)(\n\n|""")', text, re.DOTALL)
    return " ".join(match.group(1).split()) if match else ""


def section(name: str, body: str | None) -> str:
    title = SECTIONS[name]
    lines = [begin(name), f"## {title}", ""]
    script = ROOT / "bench" / f"{name}.py"
    if script.is_file() and purpose(script):
        lines += [f"`bench/{name}.py`: {purpose(script)}", ""]
    lines += [body.rstrip("\n") if body is not None else NOT_YET, end(name)]
    return "\n".join(lines)


def sections_of(text: str) -> dict[str, str]:
    """Each section already on the page, whole (its markers included)."""
    found = {}
    for name in SECTIONS:
        match = re.search(re.escape(begin(name)) + r".*?" + re.escape(end(name)), text, re.DOTALL)
        if match:
            found[name] = match.group(0)
    return found


def write(page: Path, name: str, body: str) -> None:
    """Replace `name`'s section of the page with `body`; keep every other section as it is."""
    if name not in SECTIONS:
        raise ValueError(f"bench/benchpage.py knows no section {name!r}")
    old = sections_of(page.read_text(encoding="utf-8")) if page.is_file() else {}
    old[name] = section(name, body)
    parts = [HEADER.rstrip("\n")] + [old.get(other) or section(other, None) for other in SECTIONS]
    text = "\n\n".join(parts) + "\n"
    temporary = page.with_name(f".{page.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(page)


def page_option(argv: list[str]) -> tuple[Path | None, list[str]]:
    """(the --page PATH given, the other arguments), --page taken out for the script's own parser."""
    rest, page, args = [], None, iter(argv)
    for arg in args:
        if arg == "--page":
            page = Path(next(args, "") or PAGE)
        elif arg.startswith("--page="):
            page = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return page, rest


def run(main, name: str) -> int:
    """Run a bench script's main(); with --page, write its output into the page when it succeeds."""
    page, sys.argv[1:] = page_option(sys.argv[1:])
    if page is None:
        return main() or 0
    command = " ".join(["bench/" + f"{name}.py", *sys.argv[1:]])
    started, load = datetime.datetime.now(datetime.timezone.utc), load_average()
    tee = Tee(sys.stdout)
    sys.stdout = tee
    try:
        code = main() or 0
    finally:
        sys.stdout = tee.stream
    if code == 0:
        when = started.strftime("%Y-%m-%d %H:%M UTC")
        body = (f"`{command}`, {when}, {cores()} cores ({platform.machine()}, Python "
                f"{platform.python_version()}), load average {load} before and {load_average()} after:\n\n"
                "```text\n" + tee.kept.getvalue().rstrip("\n") + "\n```")
        write(page, name, body)
        print(f"bench: wrote section {name!r} of {page}", file=sys.stderr)
    return code
