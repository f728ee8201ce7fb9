"""A `tokenizers` backend saved as a Hugging Face tokenizer directory, cached by its inputs.

Every tokenizer goldens builds (from a GGUF, from Meta's tiktoken file, from a tekken file) ends
here: wrapped as a transformers fast tokenizer, saved as `tokenizer.json` +
`tokenizer_config.json` that `AutoTokenizer.from_pretrained(dir)` loads, and cached under
`cache_dir()/vocab/<name>-<hash of inputs>`. A build is deterministic (same inputs, same bytes)
and lands through files.atomic_dir, so a directory that exists is complete. No chat template is
written: templates are pinned on their own (sources/source.py).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from generator import canonical, installed
from generator.errors import GoldensError, first_line
from generator.files import atomic_dir, cache_dir

# Bump when a build recipe changes, so cached directories built by an older recipe are not reused.
RECIPE_VERSION = 2

# The files a built tokenizer directory is made of.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def cached(name: str, inputs: Mapping[str, Any], build: Callable[[Path], Path]) -> Path:
    """`cache_dir()/vocab/<name>-<hash>`, built by `build(path)` unless it already exists.

    The hash covers `inputs` (hashes of the source files, config values) and the versions of
    the libraries that shape the bytes."""
    target = cache_dir() / "vocab" / f"{name}-{_inputs_hash(inputs)}"
    if target.is_dir():
        return target
    return build(target)


def _inputs_hash(inputs: Mapping[str, Any]) -> str:
    # Read from the installed metadata (the same strings as `__version__`), so finding a cached
    # directory never imports Transformers (0.6 s, most of a no-change `goldens regenerate`).
    versions = {"recipe": str(RECIPE_VERSION), "transformers": installed.version("transformers"),
                "tokenizers": installed.version("tokenizers")}
    return canonical.digest({**inputs, **versions})[:16]


def save(backend: Any, config: Mapping[str, Any], out_dir: Path) -> Path:
    """Wrap a `tokenizers.Tokenizer` as a transformers fast tokenizer and save it canonically.

    `config` holds the tokenizer_config values: special tokens, `add_bos_token`, ... transformers
    5 does not write `add_bos_token` back (the post-processor carries it), so the config file is
    rewritten with every value we set, sorted, so the same inputs give the same bytes.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    with atomic_dir(out_dir) as tmp:
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
            raise GoldensError(f"{out_dir}: the saved tokenizer does not load as a fast tokenizer")
    return Path(out_dir)


def load(directory: Path) -> Any:
    """A built (or any local) tokenizer directory, loaded; a bad one is a one-line error."""
    from transformers import AutoTokenizer

    directory = Path(directory)
    if not (directory / "tokenizer.json").is_file():
        raise GoldensError(f"{directory / 'tokenizer.json'}: no such tokenizer file")
    try:
        return AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise GoldensError(f"{directory}: cannot load the tokenizer ({first_line(error)})") from None
