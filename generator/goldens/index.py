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
markupsafe, Python) and the code of this project's modules that run in a render (RENDER).

The file is text, one line per model and per golden, sorted, so a diff or a merge touches only
the lines of the models that moved. It is not a golden: its name ends neither in .json nor
starts with a dot, so nothing that lists goldens picks it up.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import canonical, files, installed
from generator.config.cases import Case
from generator.config.models import Config, ModelSpec
from generator.errors import GoldensError
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

# The render's code: the modules of this project whose code runs while a golden's bytes are made,
# each case rendered with its analyses (goldens/render.py's render_model) and written as text
# (golden_file.dumps), measured by tracing every call of a render of the committed matrix
# (tests/test_index.py traces it again and fails on a module that ran and is not listed, or is
# listed and did not run). Their code is hashed, so an edit to one renders every model again. What
# the render reads as data (the resolved sources' files, the built requests, the provenance
# strings, the library versions) is hashed as data by model_inputs, so the code that resolves
# sources, loads models.yaml, writes files, runs engines or says errors is not the render's: an
# edit there renders nothing again. A module is hashed as its syntax tree without docstrings, so
# comments, blank lines, formatting and docstrings move nothing either.
RENDER = (
    "analysis/busters.py", "analysis/control_tokens.py", "analysis/diagnosis.py", "analysis/invariants.py",
    "analysis/prefix.py", "analysis/roundtrip.py",
    "config/cases.py", "config/dialects.py", "config/models.py", "config/parse_cases.py", "config/polyfill.py",
    "config/request.py", "config/shapes.py",
    "engines/__init__.py", "engines/transformers/engine.py",
    "encoder.py", "error_text.py",
    "goldens/golden_file.py", "goldens/parse_goldens.py", "goldens/render.py",
    "parse_reference.py", "redaction.py", "reference.py", "sources/processor.py",
)
# Render code that runs only for a model with an encoder reference (models.yaml references.encoder):
# hashed for every model like the rest; tests/test_index.py traces it on a matrix that has one.
ENCODER_RENDER = ("encoder.py",)
# Code that runs in a render and shapes no byte of a golden: the render's deadline and memory
# budget (a render that exceeds them ends the run, and nothing is written).
SHAPES_NOTHING = ("budget.py",)
PACKAGE = Path(__file__).resolve().parents[1]

# Files of a tokenizer directory that are model weights, never read by a tokenizer: a `dir:`
# source may be a whole model checkout, and hashing gigabytes on every run would be the floor.
WEIGHTS = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".npz")


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode("utf-8") if isinstance(data, str) else data).hexdigest()


def code_files(package: Path = PACKAGE) -> list[Path]:
    """The source files of the render (RENDER), sorted."""
    return sorted(package / name for name in RENDER)


@functools.lru_cache(maxsize=256)  # by content: a fingerprint after one edit parses only that file again
def _code_in(name: str, source: bytes) -> str:
    """A module as code: its syntax tree without docstrings (comments and layout are not in it)."""
    import ast

    tree = ast.parse(source, name)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False)


def code_fingerprint(package: Path = PACKAGE, edited: Mapping[str, bytes] | None = None) -> str:
    """sha256 of the code of every module in code_files, by path relative to generator/.
    Remembered under the identities of those files, so a no-change run parses none of them.
    `edited`: relative path -> source bytes to hash instead of the file's (what a test asks:
    would this edit render anything again?); no memo then."""
    paths = code_files(package)

    def compute(_paths) -> str:
        digest = hashlib.sha256()
        for path in paths:
            name = path.relative_to(package).as_posix()
            source = edited[name] if edited and name in edited else path.read_bytes()
            digest.update(name.encode() + b"\0" + sha256(_code_in(str(path), source)).encode())
        return digest.hexdigest()

    if edited is not None:
        return compute(paths)
    return files.remembered_all(paths, "the render's code fingerprint", compute, files.is_sha256)


def library_versions() -> dict[str, str]:
    """From installed metadata: no import of Transformers (0.6 s) to learn its version."""
    versions = {name: installed.version(name) for name in LIBRARIES}
    versions["python"] = platform.python_version()
    return versions


def tokenizer_extras(directory: Path) -> str:
    """sha256 of the tokenizer directory's files that the provenance fingerprint leaves out
    (added_tokens.json, config.json, a chat_template.jinja, ...), weights excepted."""
    paths = [path for path in sorted(Path(directory).iterdir())
             if path.name not in FINGERPRINT_FILES and not path.name.endswith(WEIGHTS) and path.is_file()]

    def compute(_paths) -> str:
        digest = hashlib.sha256()
        for path in paths:
            digest.update(path.name.encode() + b"\0" + files.sha256_hex(path).encode())
        return digest.hexdigest()

    # remembered under the files' identities (one memo read, a stat each), and each file's digest
    # under its own: a no-change run reads none of them
    return files.remembered_all(paths, "the tokenizer's other files", compute, files.is_sha256)


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


# What builds a model's cases (config/cases.py all_cases) beside the render's code (RENDER holds
# config/cases.py, dialects.py, models.py, parse_cases.py, polyfill.py, shapes.py): the modules
# that also run, the data the dialects are made from, and this module (how inputs are hashed).
# tests/test_no_change.py traces all_cases over every shape, variant and dialect and fails on a
# module or file that ran or was read and is not listed here or in RENDER.
CASES_CODE = ("config/derived.py", "config/images.py", "config/request.py", "canonical.py", "goldens/index.py")
CASES_DATA = ("requests/schema.derived.lock", "requests/schema.json")  # relative to the package's parent


def cases_fingerprint(package: Path = PACKAGE) -> str:
    """sha256 of the bytes of CASES_CODE and CASES_DATA (a missing file hashed as missing),
    remembered under their identities: a stat each on a run with nothing changed."""
    paths = [package / name for name in CASES_CODE] + [package.parent / name for name in CASES_DATA]

    def compute(_paths) -> str:
        digest = hashlib.sha256()
        for path in paths:
            try:
                data = files.sha256_of(path)
            except GoldensError:
                data = "missing"
            digest.update(path.name.encode() + b"\0" + data.encode())
        return digest.hexdigest()

    return files.remembered_all(paths, "the cases' code and data", compute, files.is_sha256)


def inputs_and_cases(model: ModelSpec, source: Source, config: Config, stamp: Mapping[str, str], code: str,
                     versions: Mapping[str, str], cases_code: str | None = None) -> tuple[str, list[str]]:
    """(model_inputs, the ids of the model's cases in order), remembered under everything the
    cases are built from: the model as parsed (its value, requests and lock entries included), the
    code and data that build them (`code`, cases_fingerprint) and the rest of model_inputs' inputs.
    A run with nothing changed builds no case and hashes no request: a memo hit, whatever the
    matrix's size. Anything that moves a case moves the key, so a hit is never stale.
    `cases_code`: cases_fingerprint(), when the caller asks it once for many models."""
    from generator.config.cases import all_cases

    def compute(_paths=()) -> dict[str, Any]:
        cases = all_cases(model)
        return {"inputs": model_inputs(model, source, config, cases, stamp, code, versions),
                "cases": [case.id for case in cases]}

    # its value: dataclasses, dicts in file order and strings, stable across runs; capabilities in
    # sorted order (polyfill.py looks them up, never iterates them), so a model just probed and the
    # same model read back from the lock are one key
    spec = repr(dataclasses.replace(model, capabilities=dict(sorted(model.capabilities.items()))))
    if " at 0x" in spec:  # something with no value repr: no key names it, so no memo
        found = compute()
    else:
        key = canonical.digest([
            FORMAT, code, cases_code or cases_fingerprint(), spec, sorted(versions.items()), config.date.isoformat(),
            sorted(stamp.items()), source.tokenizer_sha256, tokenizer_extras(source.tokenizer_dir),
            source.template_sha256,
            processor.fingerprint(model.processor) if model.processor is not None else None,
        ], keep_order=True)
        found = files.remembered_all([], f"a model's inputs and case ids, key {key}", compute,
                                     lambda known: isinstance(known, dict) and files.is_sha256(known.get("inputs"))
                                     and isinstance(known.get("cases"), list)
                                     and all(isinstance(c, str) for c in known["cases"]))
    return found["inputs"], found["cases"]


def on_disk(out: Path, case_ids: list[str]) -> list[str]:
    """The sha256 of each case's golden file under `out`, in order, read only for files whose
    identity changed since they were last hashed; a missing or unreadable one is an error."""
    def digests(paths) -> list[str]:
        return [sha256(files.read_bytes(path)) for path in paths]

    base = os.fspath(out)  # golden_path's paths as strings: a Path each costs more than its stat
    return files.remembered_all([os.path.join(base, f"{case_id}.json") for case_id in case_ids], "goldens' sha256",
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
