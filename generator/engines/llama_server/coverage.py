"""llama-server's request layer under gcov: a coverage build of the pinned llama.cpp (a variant
of engines/llama_server/llama_cpp.py's one cached-build recipe, b<build>-coverage/), run on the model's tiny
GGUF with its .gcda files sent to a folder of the session's own (GCOV_PREFIX), then read with
gcov's JSON output over the listed sources only.

gcov counts what a whole process ran, so one session is one server process: the matrix's union
takes one start per model; per-request sets (engine_layers.reached) one start per request."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from generator.engines.llama_server import llama_cpp
from generator.errors import GoldensError
from generator.measure.engine import FileCode, Key, Layer, Session
from generator.sources import pack

# The files the request layer's functions may lie in, compiled with --coverage: the route
# handlers (server-context.cpp), the OpenAI body parsing (server-common.cpp, server-chat.cpp),
# messages and tools to the template's inputs and the chat format's grammar (common/chat*.cpp,
# peg-parser, json-schema*), and the template's capabilities (common/jinja/caps.cpp). The jinja
# engine itself (lexer, parser, runtime, value) is the template, past the request layer.
SOURCES = ("common/chat.cpp", "tools/server/server-common.cpp", "tools/server/server-context.cpp",
           "tools/server/server-chat.cpp", "common/chat-auto-parser-generator.cpp",
           "common/chat-auto-parser-helpers.cpp", "common/chat-diff-analyzer.cpp", "common/chat-peg-parser.cpp",
           "common/peg-parser.cpp", "common/json-schema-to-grammar.cpp", "common/json-schema.cpp",
           "common/jinja/caps.cpp")
SUMMARY = ("the functions the /apply-template, /tokenize and /v1/chat/completions handlers reach down to the "
           "template call, from a gcov build of the pinned release")
# the entry points: each route's handler, found by the line that assigns it (server-context.cpp)
SEEDS = (("tools/server/server-context.cpp", "this->post_apply_template = "),
         ("tools/server/server-context.cpp", "this->post_tokenize = "),
         ("tools/server/server-context.cpp", "this->post_chat_completions = "))
# past the template: inference (the completion task the chat route queues once its prompt is made)
STOPS = ("server_routes::handle_completions_impl",)


def variant() -> llama_cpp.Variant:
    """The coverage build: SOURCES compiled with --coverage -O0 (gcov_launcher.py), every other
    file as the normal build compiles it (so ccache serves it), linked with libgcov; the .gcno
    notes kept beside the binary."""
    launcher = Path(__file__).with_name("gcov_launcher.py")
    return llama_cpp.Variant(
        "-reach", launcher=(sys.executable, str(launcher), ",".join(SOURCES)),
        flags=("-DCMAKE_EXE_LINKER_FLAGS=--coverage",), keep="*.gcno",
    )


def version(config) -> str:
    return f"b{config.engine_versions.get('llama-server', pack.LLAMA_CPP_BUILD)}"


def _build(config) -> llama_cpp.Build:
    build = int(version(config)[1:])
    if build != pack.LLAMA_CPP_BUILD:
        raise GoldensError(f"llama-server engine coverage: only the pinned b{pack.LLAMA_CPP_BUILD} has a "
                           f"coverage build (models.yaml pins b{build})")
    return llama_cpp.build_llama_server(build, variant=variant())


def _notes(build: llama_cpp.Build) -> dict[str, Path]:
    """Each listed source's .gcno, by the source's relative path."""
    kept = build.binary.parent / "keep"
    out = {}
    for source in SOURCES:
        found = sorted(kept.rglob(f"{Path(source).name}.gcno"))
        if not found:
            raise GoldensError(f"{build.binary.parent}: the coverage build kept no {Path(source).name}.gcno")
        out[source] = found[0]
    return out


def _gcov(notes: dict[str, Path], prefix: Path) -> dict[str, dict[int, int]]:
    """Per listed source, every line gcov counts and its count, from the .gcda files a process
    wrote under `prefix` (GCOV_PREFIX keeps the build tree's absolute path below it)."""
    out: dict[str, dict[int, int]] = {}
    for source, note in notes.items():
        counts: dict[int, int] = {}
        for data in prefix.rglob(f"{Path(source).name}.gcda"):
            shutil.copy2(note, data.with_suffix(".gcno"))
            result = subprocess.run(["gcov", "--json-format", "--stdout", data.name], cwd=data.parent,
                                    capture_output=True, timeout=300)
            if result.returncode != 0:
                raise GoldensError(f"gcov failed on {data}: {result.stderr.decode(errors='replace')[:300]}")
            for line in result.stdout.splitlines():
                if not line.strip():
                    continue
                report = json.loads(line)
                for entry in report.get("files", []):
                    if entry["file"].replace("\\", "/").endswith("/" + source):
                        for row in entry["lines"]:
                            counts[row["line_number"]] = counts.get(row["line_number"], 0) + row["count"]
        out[source] = counts
    return out


def _executable(notes: dict[str, Path]) -> dict[str, FileCode]:
    """The request layer's lines: those gcov counts (read from the notes alone: gcov with no
    counts reports each line at 0) inside the functions the route handlers reach
    (cpp_reach.py), each with its innermost function, and the pinned source's text."""
    from generator.engines.llama_server import cpp_reach

    tree = pack.llama_cpp_source()
    counted: dict[str, set[int]] = {}
    functions: list[cpp_reach.Function] = []
    with tempfile.TemporaryDirectory() as tmp:
        for source, note in notes.items():
            copy = Path(tmp) / note.name
            shutil.copy2(note, copy)
            result = subprocess.run(["gcov", "--json-format", "--stdout", "--demangled-names", copy.name], cwd=tmp,
                                    capture_output=True, timeout=300)
            lines: set[int] = set()
            for row in result.stdout.splitlines():
                if row.strip():
                    for entry in json.loads(row).get("files", []):
                        if entry["file"].replace("\\", "/").endswith("/" + source):
                            lines.update(r["line_number"] for r in entry["lines"])
                            functions += [cpp_reach.Function(source, cpp_reach.clean_name(
                                f.get("demangled_name", f["name"])), f["start_line"], f["end_line"])
                                for f in entry.get("functions", [])]
            counted[source] = lines
    texts = {source: (tree / source).read_text(encoding="utf-8", errors="replace").splitlines() for source in notes}
    functions = sorted(set(functions), key=lambda f: (f.source, f.first, f.last, f.name))
    reached = cpp_reach.reachable(functions, texts, SEEDS, STOPS)
    out = {}
    for source in notes:
        owner: dict[int, tuple[int, str]] = {}  # line -> (function's size, name): innermost wins
        for fn in functions:
            if fn.source == source:
                for line in range(fn.first, fn.last + 1):
                    if line not in owner or owner[line][0] > fn.last - fn.first:
                        owner[line] = (fn.last - fn.first, fn.name)
        mine = {line: owner[line][1] for line in counted[source]
                if line in owner and f"{source}:{owner[line][1]}" in reached}
        if mine:
            out[source] = FileCode(source, frozenset(mine), tuple(texts[source]), mine)
    return out


@contextlib.contextmanager
def session(model, source, config):
    """A Session whose run() starts one coverage llama-server per call (per request when
    `each`), sends the requests through the llama-server engine (its ids and the serving path
    `goldens check` asks), stops it (SIGTERM: it leaves through exit(), which writes the counts)
    and reads them. gcov counts a whole process, so a process started and stopped with no
    request is the start-up: a request reached a line when its process ran it more often."""
    from generator.engines.llama_server.engine import LlamaServerEngine, _framing, make_server

    build = _build(config)
    notes = _notes(build)
    files = _executable(notes)

    def one_process(requests) -> dict[Key, int]:
        server = make_server(model, source, version(config)[1:], lambda message: None)
        server.argv[0] = str(build.binary)
        with tempfile.TemporaryDirectory(prefix="goldens-gcov-") as prefix:
            server.env.update({"GCOV_PREFIX": prefix, "GCOV_PREFIX_STRIP": "0"})
            try:
                server.start()
                engine = LlamaServerEngine(server.url, media=_framing(model.processor))
                for request in requests:
                    _replay(engine, request)
            finally:
                server.stop(timeout=60)
            counts = _gcov(notes, Path(prefix))
        return {(path, line): count for path, rows in counts.items() for line, count in rows.items()}

    start_up = one_process([])
    session = Session(files, lambda requests, each=True: [
        {key for key, count in counts.items() if count > start_up.get(key, 0)}
        for counts in ([one_process([r]) for r in requests] if each else [one_process(requests)])])
    session.setup |= {key for key, count in start_up.items() if count > 0}
    yield session


def _replay(engine, request) -> None:
    """The engine's ids and its serving path, as `goldens check` asks them; a refusal is an outcome."""
    from generator.engines import EngineError

    try:
        ids = engine.ids(request)
    except EngineError:
        ids = None
    try:
        engine.serve(request, None if ids is None else list(ids))
    except EngineError:
        pass


LAYER = Layer(SUMMARY, session, version, language="cpp")
