"""Mistral's tekken tokenizers, shipped as JSON files in the installed mistral-common package.

`tekken_file` is the one place a tekken file is looked up: the tokenizer directory of a model
(the reference's view) is built from it, and the mistral-common engine encodes with the very
same file (its Source carries the path).
"""

from __future__ import annotations

from importlib import metadata as importlib_metadata
from pathlib import Path

from generator import files
from generator.errors import GoldensError, first_line
from generator.sources import hf_tokenizer

# The tekken file of Mistral NeMo (2407), v3 instruct format.
TEKKEN_NEMO = "tekken_240718.json"


def tekken_file(name: str = TEKKEN_NEMO) -> Path:
    """A tekken vocabulary shipped in the installed mistral-common package's data."""
    try:
        dist = importlib_metadata.distribution("mistral-common")
    except importlib_metadata.PackageNotFoundError:
        raise GoldensError(f"{name}: mistral-common is not installed") from None
    path = Path(dist.locate_file(f"mistral_common/data/{name}"))
    if not path.is_file():
        raise GoldensError(f"{path}: mistral-common {dist.version} ships no such tekken file")
    return path


def tokenizer_dir(out_dir: Path | None = None, *, tekken: Path | None = None) -> Path:
    """Mistral NeMo's tokenizer from mistral-common's tekken_240718.json.

    transformers' MistralConverter gives the byte-level BPE (ignore_merges, as tiktoken encodes)
    and the 1000 control tokens at ids 0..999 with mistral-common's Tekkenizer's names
    (<unk> <s> </s> [INST] [/INST] [AVAILABLE_TOOLS] ... <SPECIAL_999>), all special. No chat
    template is attached (convert_tekken_tokenizer would generate one from mistral-common).
    Without `out_dir` the directory is cached under cache_dir()/vocab.
    """
    source = Path(tekken) if tekken is not None else tekken_file()
    inputs = {"tekken": files.sha256_hex(source)}
    if out_dir is None:
        return hf_tokenizer.cached(f"tekken-{source.stem}", inputs, lambda out: _build(source, out))
    return _build(source, Path(out_dir))


def _build(source: Path, out_dir: Path) -> Path:
    from transformers.integrations.mistral.tokenizer import MistralConverter

    try:
        backend = MistralConverter(vocab_file=str(source)).converted()
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GoldensError(f"{source}: cannot convert the tekken file ({first_line(error)})") from None
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_bos_token": True,  # mistral-common starts every request with <s>; so does llama.cpp
        "add_eos_token": False,
    }
    return hf_tokenizer.save(backend, config, out_dir)
