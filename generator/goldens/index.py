"""What each model's goldens were rendered from, so `goldens regenerate` renders only what changed.

Loading a model's tokenizer is most of a regenerate (seconds each); knowing that nothing it
depends on changed is a few hashes. `<out>/regenerate.index` records, per model, one sha256 of
everything its golden bytes depend on (its inputs) and the sha256 of each golden as written.
A model is skipped only when both still hold: the inputs hash equals the recorded one and every
golden on disk has exactly the recorded bytes. Anything else (no index, an unreadable or stale
one, a golden edited or missing) renders the model again, so the index can cost a
re-render but never a wrong skip; and as a re-render writes only changed bytes, a stale index
rewrites no golden.

The inputs of a model: the tokenizer (the provenance fingerprint plus every other file of its
directory that is not weights), the template text, the built requests of every case (messages,
tools, kwargs, variants: the requests themselves, not shape names), prefix tails, the date, the
provenance strings, the versions of the libraries that render (transformers, tokenizers, jinja2,
markupsafe, Python) and the source of this project's modules that shape golden bytes (CODE).

The file is text, one line per model and per golden, sorted, so a diff or a merge touches only
the lines of the models that moved. It is not a golden: its name ends neither in .json nor
starts with a dot, so nothing that lists goldens picks it up.
"""

from __future__ import annotations

import functools
import hashlib
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import canonical, files, installed
from generator.config.cases import Case
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
from generator.goldens.golden_file import golden_path
from generator.sources import processor
from generator.sources.source import FINGERPRINT_FILES, Source

NAME = "regenerate.index"
FORMAT = 1
HEADER = (
    f"# goldens regenerate index, format {FORMAT} (generator/goldens/index.py): each model's inputs\n"
    "# hash, then the sha256 of each golden as written. A model whose inputs or goldens no longer\n"
    "# match is rendered again; delete this file (or pass --force) to render everything.\n"
)

# The libraries whose code renders a golden: Transformers' apply_chat_template and its Jinja
# environment (jinja2 + markupsafe), the Rust tokenizer.
LIBRARIES = ("transformers", "tokenizers", "jinja2", "markupsafe", "pillow")

# The render: regenerate and every module of this project it imports, at any depth (lazy
# imports inside functions too), read from the import graph. Their source is hashed, so a change
# to any of them renders every model again, and a module off the render path (goldens/diff.py,
# analysis/prefix_report.py, the replay) renders nothing. tests/test_index.py checks that every
# module a real render imports is in the graph.
ROOTS = ("generator.goldens.regenerate",)
PACKAGE = Path(__file__).resolve().parents[1]
# Modules on that graph that never shape a golden byte, so an edit to them renders nothing again:
# the HTTP seam (what it fetches is checked against pinned sha256 before any render reads it),
# managed servers, builds and venvs (no render runs in them), progress lines and the light-run
# guard. A module is hashed as its syntax tree without docstrings, so comments, blank lines,
# formatting and docstrings move nothing either.
NOT_RENDER = ("generator.http", "generator.progress", "generator.heavy", "generator.servers", "generator.goldens.pins")

# Files of a tokenizer directory that are model weights, never read by a tokenizer: a `dir:`
# source may be a whole model checkout, and hashing gigabytes on every run would be the floor.
WEIGHTS = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".npz")


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def code_files(package: Path = PACKAGE) -> list[Path]:
    """The source files of ROOTS and of every module of the package they import."""
    seen: dict[str, Path] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        path = _module_file(package, name)
        if name in seen or path is None or not_render(name):
            continue
        seen[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # its packages' __init__
        todo.extend(_imports(path))
    return sorted(seen.values())


def not_render(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in NOT_RENDER)


def _module_file(package: Path, name: str) -> Path | None:
    """generator.x.y -> package/x/y.py or package/x/y/__init__.py; None for a name that is an
    attribute (from generator.x import function), not a module."""
    parts = name.split(".")
    if parts[0] != "generator":
        return None
    base = package.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imports(path: Path) -> set[str]:
    """Every `generator...` name an import statement in the file names, wherever it is."""
    return set(_imports_in(str(path), path.read_bytes()))


@functools.lru_cache(maxsize=256)  # by content: a fingerprint after one edit parses only that file again
def _imports_in(name: str, source: bytes) -> frozenset[str]:
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(name for name in found if name.split(".")[0] == "generator")


def _code_of(path: Path) -> str:
    """A module as code: its syntax tree without docstrings (comments and layout are not in it)."""
    return _code_in(str(path), path.read_bytes())


@functools.lru_cache(maxsize=256)
def _code_in(name: str, source: bytes) -> str:
    import ast

    tree = ast.parse(source, name)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False)


def code_fingerprint(package: Path = PACKAGE) -> str:
    """sha256 of the source of every module in code_files, by path relative to generator/.
    Remembered under the identities of all the package's files, so a no-change run parses no
    import graph."""
    every = sorted(path for path in package.rglob("*.py") if "__pycache__" not in path.parts)

    def compute(_paths) -> str:
        digest = hashlib.sha256()
        for path in code_files(package):
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + sha256(_code_of(path)).encode())
        return digest.hexdigest()

    return files.remembered_all(every, "the render's code fingerprint", compute, files.is_sha256)


def library_versions() -> dict[str, str]:
    """From installed metadata: no import of Transformers (0.6 s) to learn its version."""
    versions = {name: installed.version(name) for name in LIBRARIES}
    versions["python"] = platform.python_version()
    return versions


def tokenizer_extras(directory: Path) -> str:
    """sha256 of the tokenizer directory's files that the provenance fingerprint leaves out
    (added_tokens.json, config.json, a chat_template.jinja, ...), weights excepted."""
    digest = hashlib.sha256()
    for path in sorted(Path(directory).iterdir()):
        if path.name in FINGERPRINT_FILES or path.name.endswith(WEIGHTS) or not path.is_file():
            continue
        digest.update(path.name.encode() + b"\0" + sha256(path.read_bytes()).encode())
    return digest.hexdigest()


def model_inputs(model: ModelSpec, source: Source, config: Config, cases: list[Case],
                 stamp: Mapping[str, str], code: str, versions: Mapping[str, str]) -> str:
    """One sha256 of everything a model's golden bytes depend on. Requests are hashed as
    built, in their own key order (templates render tools with tojson, which keeps it)."""
    tails = {variant: [tail.tokens, tail.reason] for variant, tail in sorted(model.prefix_tails.items())}
    inputs: list[tuple[str, Any]] = [
        ("format", FORMAT),
        ("code", code),
        ("versions", dict(sorted(versions.items()))),
        ("date", config.date.isoformat()),
        ("provenance", dict(sorted(stamp.items()))),
        ("tokenizer", source.tokenizer_sha256),
        ("tokenizer_extras", tokenizer_extras(source.tokenizer_dir)),
        ("template", source.template_sha256),
        ("prefix_tails", tails),
        ("processor", processor.fingerprint(model.processor) if model.processor is not None else None),
        ("cases", [[case.id, case.request] for case in cases]),
        ("parse_end", list(model.parse.end) if model.parse is not None else None),
    ]
    return canonical.digest(inputs, keep_order=True)


def on_disk(out: Path, case_ids: list[str]) -> list[str]:
    """The sha256 of each case's golden file under `out`, in order, read only for files whose
    identity changed since they were last hashed; a missing or unreadable one is an error."""
    def digests(paths) -> list[str]:
        return [sha256(files.read_bytes(path)) for path in paths]

    return files.remembered_all([golden_path(out, case_id) for case_id in case_ids], "goldens' sha256",
                                digests, lambda known: isinstance(known, list) and len(known) == len(case_ids)
                                and all(files.is_sha256(value) for value in known))


@dataclass
class Entry:
    inputs: str
    goldens: dict[str, str] = field(default_factory=dict)  # case id -> sha256 of its golden file


@dataclass
class Index:
    models: dict[str, Entry] = field(default_factory=dict)

    def fresh(self, model: str, inputs: str, case_ids: Iterable[str], out: Path) -> bool:
        """True only when the recorded inputs match and every golden on disk is byte for byte
        the one recorded, for exactly these cases. The goldens' digests are remembered under
        their files' identities (files.remembered_all: path, inode, size, mtime), so a run
        where no golden was touched opens none: its cost is a stat per golden."""
        entry = self.models.get(model)
        case_ids = list(case_ids)
        if entry is None or entry.inputs != inputs or sorted(entry.goldens) != sorted(case_ids):
            return False
        try:
            digests = on_disk(out, case_ids)
        except GoldensError:
            return False
        return digests == [entry.goldens[case_id] for case_id in case_ids]

    def record(self, model: str, inputs: str, written: Mapping[str, str]) -> None:
        """`written`: case id -> the golden text exactly as written."""
        self.models[model] = Entry(inputs, {case_id: sha256(text) for case_id, text in written.items()})

    def dumps(self) -> str:
        lines = [HEADER]
        for name in sorted(self.models):
            entry = self.models[name]
            lines.append(f"model {name} {entry.inputs}\n")
            lines += [f"golden {case_id} {digest}\n" for case_id, digest in sorted(entry.goldens.items())]
        return "".join(lines)


def loads(text: str) -> Index:
    """The index in `text`; anything malformed (a merge conflict, a hand edit) is an empty
    index: it only means rendering again."""
    index = Index()
    header_format = f"format {FORMAT} "
    lines = text.splitlines()
    if not lines or header_format not in lines[0]:
        return Index()
    for line in lines:
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split(" ")
        if len(parts) != 3 or len(parts[2]) != 64:
            return Index()
        kind, name, digest = parts
        if kind == "model":
            index.models[name] = Entry(digest)
        elif kind == "golden" and name.split("/", 1)[0] in index.models:
            index.models[name.split("/", 1)[0]].goldens[name] = digest
        else:
            return Index()
    return index


def load(out: Path) -> Index:
    try:
        return loads(files.read_text(Path(out) / NAME))
    except GoldensError:  # missing, or not a regular file: render everything; writing it says why
        return Index()


def save(out: Path, index: Index) -> bool:
    """Write the index (atomically, and only when its bytes changed)."""
    return files.atomic_write(Path(out) / NAME, index.dumps(), within=out)
