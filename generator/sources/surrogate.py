"""A surrogate family's tokenizer: the nearest real tokenizer plus the template's special tokens.

A built-in family whose own tokenizer no package here ships (generator/config/families.py) is
rendered with the nearest real one, to which the special tokens its template writes are added,
so `<|open|>` is one token, as the model's own tokenizer has it, and not a dozen pieces of text.
The directory is derived from the nearest's directory by editing its two files, never by
re-saving a tokenizer: every id of the nearest stays what it was, and the same inputs give the
same bytes. Every engine is built from this one directory (the reference, the tiny GGUF, vLLM's
tiny model dir, minijinja, transformers.js), so they all see the same tokenizer.

- tokenizer.json: each token of `adds` the nearest does not already have (as an added token or
  in its vocabulary) is appended to `added_tokens` with the next free id, `special: true`,
  `normalized: false`; a token it has stays its own.
- tokenizer_config.json: the same tokens in `added_tokens_decoder`; its chat template is taken
  out (the family's template is pinned on its own, sources/source.py).

Cached under cache_dir()/vocab/surrogate-<family>-<hash of the nearest's fingerprint and adds>.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from generator.errors import GoldensError
from generator.files import atomic_dir
from generator.json_reader import load_json
from generator.sources import hf_tokenizer

RECIPE = 1  # bump when the derivation changes, so cached directories are not reused


def tokenizer_dir(nearest: Path, family: str, adds: tuple[str, ...], fingerprint: str) -> Path:
    """The cached surrogate directory of `family`: `nearest` (whose tokenizer fingerprint is
    `fingerprint`) with `adds` added as special tokens."""
    inputs = {"nearest": fingerprint, "adds": list(adds), "surrogate_recipe": RECIPE}
    return hf_tokenizer.cached(f"surrogate-{family}", inputs, lambda out: build(Path(nearest), adds, out))


def derive(tokenizer: dict[str, Any], config: dict[str, Any], adds: tuple[str, ...]) -> tuple[list[dict], dict, dict]:
    """(the added-token entries made, the new tokenizer.json, the new tokenizer_config.json)."""
    added = list(tokenizer.get("added_tokens") or [])
    vocab = (tokenizer.get("model") or {}).get("vocab")
    known = {item["content"] for item in added}
    ids = [item["id"] for item in added]
    if isinstance(vocab, dict):
        known |= set(vocab)
        ids += list(vocab.values())
    elif isinstance(vocab, list):  # a Unigram model: [[piece, score], ...], ids by position
        known |= {item[0] for item in vocab}
        ids.append(len(vocab) - 1)
    next_id = max(ids, default=-1) + 1
    made = []
    for content in adds:
        if content in known:
            continue
        made.append({"id": next_id, "content": content, "single_word": False, "lstrip": False,
                     "rstrip": False, "normalized": False, "special": True})
        known.add(content)
        next_id += 1
    tokenizer = {**tokenizer, "added_tokens": added + made}
    config = {key: value for key, value in config.items() if key != "chat_template"}
    decoder = dict(config.get("added_tokens_decoder") or {})
    for item in made:
        decoder[str(item["id"])] = {key: item[key] for key in
                                    ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
    config["added_tokens_decoder"] = decoder
    return made, tokenizer, config


def _read_json(path: Path) -> Any:
    """A pinned source's JSON: the fast parse, and load_json's checks (one line) only when it fails."""
    data = path.read_bytes()
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeError, ValueError, RecursionError):
        return load_json(data, str(path))


def build(nearest: Path, adds: tuple[str, ...], out_dir: Path) -> Path:
    """Write the surrogate directory into `out_dir` (atomically); see the module docstring."""
    try:
        tokenizer = _read_json(nearest / "tokenizer.json")
        config = _read_json(nearest / "tokenizer_config.json")
    except OSError as error:
        raise GoldensError(f"{nearest}: cannot read the nearest tokenizer ({error.strerror})") from None
    if not isinstance(tokenizer, dict) or not isinstance(config, dict):
        raise GoldensError(f"{nearest}: tokenizer.json and tokenizer_config.json must be JSON objects")
    _, tokenizer, config = derive(tokenizer, config, adds)
    with atomic_dir(out_dir) as tmp:
        (tmp / "tokenizer.json").write_text(json.dumps(tokenizer, indent=2, ensure_ascii=False) + "\n",
                                            encoding="utf-8")
        (tmp / "tokenizer_config.json").write_text(
            json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        from tokenizers import Tokenizer

        try:
            Tokenizer.from_file(str(tmp / "tokenizer.json"))
        except Exception as error:  # the Rust loader's own message, one line
            raise GoldensError(f"{nearest}: the surrogate tokenizer does not load ({str(error).splitlines()[0]})") from None
    return Path(out_dir)
