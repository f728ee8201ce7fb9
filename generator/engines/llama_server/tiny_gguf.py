"""Tiny GGUF models that carry a real tokenizer: enough for a server to start and tokenize.

A server needs a model file, but token ids depend only on the tokenizer metadata, never on the
weights. So a tiny model (one layer, n_embd 64, seeded random f16 weights) with the real
tokenizer metadata answers every token-id question the full model would, in a few MB.

The tokenizer metadata is written the way llama.cpp's own converter writes it, with the
converter's own gguf-py from the pinned llama.cpp source, by tiny_gguf_writer.py in a child
process (so this process keeps whatever `gguf` it already imported). This module is the cached
driver: it keys the file by every input, takes the build lock and lands the file atomically.

Files are cached under cache_dir()/tiny/ by a hash of every input; never commit them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from generator.errors import GoldensError
from generator.files import atomic_file, cache_dir, file_lock, sha256_of
from generator.sources import pack

# The program run under the pinned gguf-py, and its version: bump it when the writer changes,
# so cached files from an older writer are not reused.
WRITER = Path(__file__).resolve().with_name("tiny_gguf_writer.py")
WRITER_VERSION = 1


def tiny_gguf(
    name: str,
    tokenizer_dir: Path | None,
    template: str | None,
    vocab_gguf: Path | None = None,
    *,
    vocab_size: int | None = None,
) -> Path:
    """A cached tiny GGUF whose tokenizer is the real one and whose chat template is `template`.

    Exactly one source: `tokenizer_dir` (a HF dir with tokenizer.json + tokenizer_config.json,
    converted as llama.cpp's converter would) or `vocab_gguf` (one of llama.cpp's
    models/ggml-vocab-*.gguf, whose tokenizer.* metadata is copied as is). `template=None`
    keeps the source's own template. `vocab_size` stands in for config.json's vocab_size,
    which pads a BPE vocab with [PADn] tokens as the converter does (ids never change).
    """
    if (tokenizer_dir is None) == (vocab_gguf is None):
        raise GoldensError(f"tiny_gguf({name!r}): give exactly one of tokenizer_dir or vocab_gguf")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise GoldensError(f"tiny_gguf: name {name!r} must be letters, digits, '.', '_' or '-'")
    inputs: list[Path] = []
    if tokenizer_dir is not None:
        tokenizer_dir = Path(tokenizer_dir)
        for file in ("tokenizer.json", "tokenizer_config.json"):
            if not (tokenizer_dir / file).is_file():
                raise GoldensError(f"tiny_gguf({name!r}): {tokenizer_dir / file} does not exist")
            inputs.append(tokenizer_dir / file)
    else:
        vocab_gguf = Path(vocab_gguf)
        if not vocab_gguf.is_file():
            raise GoldensError(f"tiny_gguf({name!r}): {vocab_gguf} does not exist")
        inputs.append(vocab_gguf)

    key = hashlib.sha256()
    key.update(json.dumps(
        [WRITER_VERSION, pack.LLAMA_CPP.sha256, name, template, vocab_size,
         "dir" if tokenizer_dir is not None else "gguf"]
    ).encode())
    for path in inputs:
        key.update(sha256_of(path).encode())
    digest = key.hexdigest()

    out_dir = cache_dir() / "tiny"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}-{digest[:16]}.gguf"
    if target.exists():
        return target

    with file_lock(out_dir / f".{target.name}.lock"):
        if target.exists():
            return target
        source = pack.llama_cpp_source()
        spec = {
            "name": name,
            "tokenizer_dir": str(tokenizer_dir) if tokenizer_dir is not None else None,
            "vocab_gguf": str(vocab_gguf) if vocab_gguf is not None else None,
            "template": template,
            "vocab_size": vocab_size,
            "seed": int(digest[:8], 16),
            "converter": str(source / "conversion" / "base.py"),
        }
        with atomic_file(target, mode=0o644) as tmp:
            _run_writer(spec, tmp, source / "gguf-py", name)
    return target


def _run_writer(spec: dict, out: Path, gguf_py: Path, name: str) -> None:
    """Run tiny_gguf_writer.py in a child process whose `gguf` is the pinned source's gguf-py."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(gguf_py)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    env["HF_HUB_OFFLINE"] = "1"
    result = subprocess.run(
        [sys.executable, str(WRITER), json.dumps(spec), str(out)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        tail = " | ".join(lines[-5:]) or f"exit code {result.returncode}"
        raise GoldensError(f"tiny_gguf({name!r}): writing the GGUF failed: {tail}")
