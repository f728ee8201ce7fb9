"""llama.cpp's tokenizer test vectors: the `.inp` / `.out` files beside each vocab GGUF.

convert_hf_to_gguf_update.py wrote each `.out` with the model's own Hugging Face tokenizer, so a
tokenizer goldens builds from a GGUF (or from Meta's or Mistral's files) must give exactly those
ids on those texts.
"""

from __future__ import annotations

from pathlib import Path

from generator.errors import GoldensError, first_line
from generator.sources import hf_tokenizer


def read(gguf_path: Path) -> list[tuple[str, list[int]]]:
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
        raise GoldensError(f"{inp}: cannot read test inputs ({first_line(error)})") from None
    try:
        lines = out.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise GoldensError(f"{out}: cannot read expected ids ({first_line(error)})") from None
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


def check(tokenizer_dir: Path, gguf_path: Path) -> list[str]:
    """Mismatches between a tokenizer directory and a vocab GGUF's .inp/.out vectors (empty = pass)."""
    tokenizer = hf_tokenizer.load(tokenizer_dir)
    name = Path(gguf_path).name
    problems = []
    for number, (text, expected) in enumerate(read(Path(gguf_path))):
        got = tokenizer.encode(text, add_special_tokens=False)
        if got != expected:
            problems.append(f"{name} test {number} {text[:60]!r}: expected {expected[:24]} got {got[:24]}")
    return problems
