"""A model's multimodal processor as files: the tokenizer plus its processor settings.

Transformers' processors load from a directory (AutoProcessor.from_pretrained), and so do
the tiny vision models the servers run. This builds that directory once per settings hash:
the resolved tokenizer files plus processor_config.json and preprocessor_config.json written
from models.yaml, so the reference and every engine read the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from generator.config.models import ProcessorSpec
from generator.errors import GoldensError
from generator.files import build_dir_once, cache_dir, sha256_hex

_FORMAT = 1
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "tokenizer.model", "vocab.json", "merges.txt")


def config_files(spec: ProcessorSpec) -> dict[str, str]:
    """The processor's JSON files, as they are written and hashed."""
    return {
        "processor_config.json": json.dumps(spec.processor_config, indent=2, sort_keys=True) + "\n",
        "preprocessor_config.json": json.dumps(spec.preprocessor_config, indent=2, sort_keys=True) + "\n",
    }


def fingerprint(spec: ProcessorSpec) -> str:
    """sha256 of the processor settings (the tokenizer has its own fingerprint)."""
    digest = hashlib.sha256()
    for name, text in sorted(config_files(spec).items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(text.encode()).digest())
    return digest.hexdigest()


def processor_dir(model: str, spec: ProcessorSpec, tokenizer_dir: Path) -> Path:
    """A cached directory AutoProcessor loads: tokenizer files + the processor's settings."""
    sources = [tokenizer_dir / name for name in _TOKENIZER_FILES if (tokenizer_dir / name).is_file()]
    files = config_files(spec)
    digest = hashlib.sha256(f"{_FORMAT}\0{model}\0".encode())
    for name, text in sorted(files.items()):
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    for source in sources:  # each file's digest, remembered under its identity (files.sha256_hex)
        digest.update(source.name.encode() + b"\0" + bytes.fromhex(sha256_hex(source)) + b"\0")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    root = cache_dir() / "processors"
    target = root / f"{safe}-{digest.hexdigest()[:16]}"

    def build(out: Path) -> str:
        try:
            for source in sources:
                shutil.copyfile(source, out / source.name)
            for name, text in files.items():
                (out / name).write_text(text, encoding="utf-8")
        except OSError as error:
            raise GoldensError(f"{model}: cannot write the processor files ({error})") from None
        return digest.hexdigest()

    return build_dir_once(target, build)
