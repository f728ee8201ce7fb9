"""GGUF files as tokenizer sources: their metadata, the tokenizer directory they describe, and
the chat templates they embed.

llama.cpp's models/ggml-vocab-*.gguf (in the pinned llama.cpp source) carry the vocabulary of
several models of the matrix, and a user's own GGUF can be a model's source too. The tokenizer a
GGUF describes is rebuilt as a Hugging Face fast tokenizer, the way llama.cpp reads the same file,
and checked against llama.cpp's test vectors (sources/vectors.py). A GGUF's embedded template
belongs to the model it was converted from, which is not always the matrix's model (the phi-3
vocab GGUF is Phi-3-mini's, used for Phi-3.5), so models.yaml says which template to use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from generator.errors import GoldensError, first_line
from generator.sources import gguf_metadata, hf_tokenizer, pack

# llama.cpp's token types (gguf.TokenType): what each id of `tokenizer.ggml.token_type` means.
_CONTROL, _USER_DEFINED = 3, 4

# `[PAD<id>]` fills a GGUF vocabulary up to the model's embedding size; the real tokenizer has no
# such token, so it stays a plain (unreachable) vocabulary entry and is never matched in text.
_PLACEHOLDER = re.compile(r"^\[PAD(\d+)\]$")

# llama.cpp's per-pre-tokenizer defaults (src/llama-vocab.cpp, build 11434) for the BPE vocabularies
# whose merges must be skipped when a whole word is already a token, tiktoken-style. The GGUF does
# not store this, and without it "Cửa Việt" tokenizes differently from Meta's own tokenizer.
_IGNORE_MERGES_PRE = frozenset(
    {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
     "jina-v5-nano", "tekken", "minicpm5", "youtu", "glm4", "glm5", "granite-embed-multi-97m"}
)
# ... and the ones for which llama.cpp adds BOS when the GGUF has no `add_bos_token` key.
_ADD_BOS_PRE = frozenset(
    {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
     "jina-v5-nano", "tekken", "chameleon"}
)


def llama_cpp_vocab(name: str) -> Path:
    """`models/ggml-vocab-<name>.gguf` of the pinned llama.cpp source."""
    path = pack.llama_cpp_source() / "models" / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        raise GoldensError(f"{path}: no such vocab GGUF in the pinned llama.cpp source")
    return path


def tokenizer_dir(gguf_path: Path, *, config: Mapping[str, Any] | None = None) -> Path:
    """The cached tokenizer directory of a GGUF file (a user's model or a llama.cpp vocab), with
    `config` replacing tokenizer_config values (see build_tokenizer_dir)."""
    gguf_path = Path(gguf_path)
    # "overrides" is the cache key's name for `config`: renaming it would rebuild every cached directory
    # The header alone (the tokenizer is built from its key-value pairs): a model file's tensors
    # are not hashed on every resolve.
    inputs = {"gguf_header": gguf_metadata.header_sha256(gguf_path), "overrides": dict(config or {})}
    name = "gguf-" + gguf_path.stem.removeprefix("ggml-vocab-")
    return hf_tokenizer.cached(name, inputs, lambda out: build_tokenizer_dir(gguf_path, out, config=config))


def read_metadata(gguf_path: Path) -> dict[str, Any]:
    """The `general.*` and `tokenizer.*` metadata of a GGUF, read with gguf-py's GGUFReader.

    transformers' own GGUF reader imports torch, which this project does not install.
    """
    from gguf import GGUFReader

    path = Path(gguf_path)
    if not path.is_file():
        raise GoldensError(f"{path}: no such GGUF file")
    try:
        reader = GGUFReader(path)
        return {
            key: value.contents()
            for key, value in reader.fields.items()
            if key.startswith(("general.", "tokenizer."))
        }
    except (ValueError, OSError, KeyError, IndexError, UnicodeDecodeError) as error:
        raise GoldensError(f"{path}: not a readable GGUF file ({first_line(error)})") from None


def build_tokenizer_dir(gguf_path: Path, out_dir: Path, *, config: Mapping[str, Any] | None = None) -> Path:
    """Build the fast tokenizer a GGUF describes into `out_dir` (tokenizer.json + config).

    The tokenizer model, normalizer and pre-tokenizer come from transformers.integrations.gguf
    (its builders and split regexes), with what the GGUF cannot say filled in from llama.cpp's own
    rules for the same file: `ignore_merges` for llama3/tekken-style BPE, BOS defaults, Phi-3's
    rstrip on its chat tokens, Command-R's NFC + digit-splitting pre-tokenizer (the shape of
    transformers' CohereTokenizer). `config` replaces tokenizer_config values afterwards:
    what the model's own tokenizer states and the GGUF (converted from a sibling model) does not.
    """
    path = Path(gguf_path)
    meta = read_metadata(path)
    try:
        backend, values = _gguf_backend(meta)
    except (ValueError, KeyError, TypeError) as error:
        raise GoldensError(f"{path}: cannot build a tokenizer from it ({first_line(error)})") from None
    values.update(config or {})
    _check_gguf_ids(path, backend, meta)
    return hf_tokenizer.save(backend, values, Path(out_dir))


def chat_templates(gguf_path: Path) -> dict[str, str]:
    """The chat templates a GGUF embeds: "default" (`tokenizer.chat_template`) and named ones,
    read from the header alone (gguf_metadata), not through gguf-py, which decodes the whole
    vocabulary first (13 s for Command-R's 256k tokens, on every resolve of the model).

    For Command-R this is the only plain-chat template at hand: llama.cpp's models/templates has
    Command-R+'s tool-use template, which needs `tools` and writes a long tool preamble.
    """
    return gguf_metadata.chat_templates(Path(gguf_path))


def _gguf_backend(meta: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """`(tokenizers.Tokenizer, tokenizer_config values)` for a GGUF's tokenizer metadata."""
    from tokenizers import Tokenizer
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        select_tokenizer_builder,
        set_split_regex,
    )

    architecture = meta["general.architecture"]
    tokenizer_dict = {
        name: meta[f"tokenizer.{key}"]
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if f"tokenizer.{key}" in meta
    }
    tokens = tokenizer_dict["tokens"]
    kind = tokenizer_dict.get("tokenizer_type")
    pre = tokenizer_dict.get("pre_tokenizer_type")
    specials = _gguf_special_tokens(meta, tokens)

    if kind == "gpt2":
        builder = _command_r_tokenizer if pre == "command-r" else _byte_level_tokenizer
        instance = builder(tokenizer_dict, specials)
    else:
        instance = select_tokenizer_builder(architecture, kind)(tokenizer_dict)
    set_split_regex(instance, tokenizer_dict)

    data = json.loads(instance.backend_tokenizer.to_str())
    data["added_tokens"] = _gguf_added_tokens(meta, tokenizer_dict, data["model"])
    data["post_processor"] = None  # rebuilt from add_bos_token / add_eos_token by transformers
    if pre in _IGNORE_MERGES_PRE:
        data["model"]["ignore_merges"] = True
    if data["model"].get("byte_fallback") and data["model"].get("unk_token") is None:
        data["model"]["unk_token"] = specials.get("unk_token")  # as sentencepiece's tokenizer.json
    backend = Tokenizer.from_str(json.dumps(data, ensure_ascii=False))

    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    if add_bos is None:  # llama.cpp's default for a file that does not say
        add_bos = kind == "llama" or (kind == "gpt2" and pre in _ADD_BOS_PRE)
    if kind == "gemma4":
        # transformers' rule: the reference adds no BOS, Gemma 4's template writes <bos> itself
        # (llama.cpp forces it on instead, ggml-org/llama.cpp#21500).
        add_bos = False
    config: dict[str, Any] = {name: None for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
    config.update(specials)
    config["add_bos_token"] = bool(add_bos)
    config["add_eos_token"] = bool(meta.get("tokenizer.ggml.add_eos_token", False))
    return backend, config


def _gguf_special_tokens(meta: Mapping[str, Any], tokens: list[str]) -> dict[str, str]:
    """`{"bos_token": "<s>", ...}` for the special token ids the GGUF names."""
    named = {}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("unk_token", "unknown_token_id"), ("pad_token", "padding_token_id"),
                      ("mask_token", "mask_token_id"), ("sep_token", "seperator_token_id"),
                      ("cls_token", "cls_token_id")):
        token_id = meta.get(f"tokenizer.ggml.{key}")
        if token_id is not None and 0 <= token_id < len(tokens):
            named[name] = tokens[token_id]
    return named


def _byte_level_vocab(tokenizer_dict: Mapping[str, Any]) -> dict[str, int]:
    """The vocabulary spelled exactly as the file (and so the model's tokenizer.json) spells it.

    transformers' builder re-spells every token outside the byte alphabet from its UTF-8 bytes.
    Command-R's vocabulary holds both "\u2122" (id 268, unreachable) and its byte spelling (id
    33572); re-spelled, the two collide and 43 ids vanish. Verbatim, each keeps its id, as in the
    model's own tokenizer.json, and merges only ever produce byte-alphabet spellings anyway.
    """
    return {token: index for index, token in enumerate(tokenizer_dict["tokens"])}


def _merges(tokenizer_dict: Mapping[str, Any]) -> list[tuple[str, ...]]:
    return [tuple(merge.split(" ")) for merge in tokenizer_dict.get("merges", ())]


def _byte_level_tokenizer(tokenizer_dict: Mapping[str, Any], specials: Mapping[str, str]) -> Any:
    """GPT-2-style byte-level BPE, with the GGUF's own special tokens.

    transformers' builder leaves GPT2Tokenizer's defaults, which add an `<|endoftext|>` that a
    Llama 3 vocabulary does not have (id 128256).
    """
    from transformers.models.gpt2.tokenization_gpt2 import GPT2Tokenizer

    return GPT2Tokenizer(
        vocab=_byte_level_vocab(tokenizer_dict), merges=_merges(tokenizer_dict),
        unk_token=specials.get("unk_token"), bos_token=specials.get("bos_token"),
        eos_token=specials.get("eos_token"), pad_token=specials.get("pad_token"),
    )


def _command_r_tokenizer(tokenizer_dict: Mapping[str, Any], specials: Mapping[str, str]) -> Any:
    """Command-R: byte-level BPE behind NFC and a digit splitter (transformers' CohereTokenizer).

    With GPT-2's plain pre-tokenizer " ½" stays one word; Cohere's splits it like a digit.
    """
    from transformers.models.cohere.tokenization_cohere import CohereTokenizer

    return CohereTokenizer(
        vocab=_byte_level_vocab(tokenizer_dict), merges=_merges(tokenizer_dict),
        unk_token=specials.get("unk_token"), bos_token=specials["bos_token"],
        eos_token=specials["eos_token"], pad_token=specials.get("pad_token"),
    )


def _gguf_added_tokens(
    meta: Mapping[str, Any], tokenizer_dict: Mapping[str, Any], model: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The `added_tokens` of tokenizer.json: control tokens as special, user-defined as plain.

    Both are matched whole in text (llama.cpp does the same for user-defined tokens even without
    parse_special). Phi-3 models get llama.cpp's attributes, which are the `rstrip` flags of
    Phi-3's own tokenizer.json: every chat token eats the whitespace after it, except <unk>, <s>
    and <|endoftext|>; </s> too although it is not special.
    """
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = tokenizer_dict["tokens"]
    types = tokenizer_dict.get("token_type") or ()
    byte_level = tokenizer_dict.get("tokenizer_type") == "gpt2"
    alphabet = set(bytes_to_unicode().values())
    name = str(meta.get("general.name", "")).lower()
    phi3 = "phi-3" in name or "phi3" in name
    vocab = model.get("vocab") or {}

    added = []
    for index, (token, kind) in enumerate(zip(tokens, types)):
        if kind not in (_CONTROL, _USER_DEFINED):
            continue
        placeholder = _PLACEHOLDER.match(token)
        if placeholder and int(placeholder.group(1)) == index:
            continue
        if kind == _CONTROL and byte_level and not set(token) <= alphabet:
            continue  # a llama.cpp mislabel, as transformers' add_gguf_special_tokens skips too
        if isinstance(vocab, dict) and vocab.get(token, index) != index:
            raise ValueError(f"token {index} {token!r} is not at its own id in the vocabulary")
        rstrip = False
        if phi3:
            rstrip = token == "</s>" or (kind == _CONTROL and token not in ("<unk>", "<s>", "<|endoftext|>"))
        added.append({
            "id": index, "content": token, "single_word": False, "lstrip": False, "rstrip": rstrip,
            "normalized": False, "special": kind == _CONTROL,
        })
    return added


def _check_gguf_ids(path: Path, backend: Any, meta: Mapping[str, Any]) -> None:
    """Every GGUF token keeps its id, and the tokenizer has no token the GGUF does not."""
    tokens = meta["tokenizer.ggml.tokens"]
    size = backend.get_vocab_size(with_added_tokens=True)
    if size != len(tokens):
        raise GoldensError(f"{path}: built tokenizer has {size} tokens, the GGUF {len(tokens)}")
    for index, kind in enumerate(meta.get("tokenizer.ggml.token_type") or ()):
        if kind in (_CONTROL, _USER_DEFINED) and backend.token_to_id(tokens[index]) not in (index, None):
            raise GoldensError(f"{path}: token {tokens[index]!r} moved from id {index}")
