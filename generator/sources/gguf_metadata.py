"""A GGUF's key-value header, read for its strings and scalars only.

gguf-py's GGUFReader decodes every field, array element by element, and indexes every tensor:
on Command-R's 11 MB vocab GGUF that is 13 s for a chat template a few kilobytes long, paid on
every `goldens regenerate`. This reader walks the header once with `struct`, steps over arrays
(a string array by its length prefixes, anything else by its size) and stops before the tensor
infos, so asking for a template costs a read of the header and nothing else, and a cache keyed
on a GGUF's tokenizer hashes the header (header_sha256), not a model's gigabytes of tensors.

Format (GGUF v2/v3, either byte order): magic `GGUF`, u32 version, u64 tensor count, u64 kv count,
then per kv a string key (u64 length + UTF-8), a u32 value type and the value.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from pathlib import Path
from typing import Any

from generator.errors import GoldensError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
STRING, ARRAY = 8, 9
# value type -> struct code of the fixed-size scalars
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class _Header:
    """A cursor over the mapped file that raises ValueError on anything out of bounds."""

    def __init__(self, data: mmap.mmap | bytes):
        self.data = data
        self.at = 0
        self.order = "<"

    def take(self, code: str) -> Any:
        fmt = self.order + code
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise ValueError(f"truncated at byte {self.at}")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return value

    def string(self) -> str:
        length = self.take("Q")
        end = self.at + length
        if end > len(self.data):
            raise ValueError(f"a string of {length} bytes runs past the end at byte {self.at}")
        text = bytes(self.data[self.at:end]).decode("utf-8")
        self.at = end
        return text

    def skip_string(self) -> None:
        length = self.take("Q")
        self.at += length
        if self.at > len(self.data):
            raise ValueError("a string runs past the end of the file")

    def value(self, kind: int, keep: bool) -> Any:
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            if keep:
                return self.string()
            self.skip_string()
            return None
        if kind == ARRAY:
            item, count = self.take("I"), self.take("Q")
            if item == STRING:  # the hot loop: a vocabulary is 100k-260k strings
                length = struct.Struct(self.order + "Q").unpack_from
                at, data = self.at, self.data
                for _ in range(count):
                    at += 8 + length(data, at)[0]
                self.at = at
                if at > len(data):
                    raise ValueError("a string array runs past the end of the file")
            elif item in SCALARS:
                self.at += struct.calcsize(SCALARS[item]) * count
                if self.at > len(self.data):
                    raise ValueError("an array runs past the end of the file")
            else:  # nested arrays: step through them one by one
                for _ in range(count):
                    self.value(item, keep=False)
            return None
        raise ValueError(f"unknown value type {kind} at byte {self.at - 4}")


def read(path: Path, prefixes: tuple[str, ...] = ("general.", "tokenizer.")) -> dict[str, Any]:
    """The scalar and string values of the keys starting with `prefixes`; arrays are stepped over
    (for a vocabulary or merges use vocab.read_gguf_tokenizer)."""
    return _mapped(path, lambda data: _read(data, prefixes)[0])


def header_sha256(path: Path) -> str:
    """sha256 of the header up to the tensor infos: magic, version, counts and every key-value
    pair, all a tokenizer is built from. A model file's tensors (gigabytes) are never read, so
    this stays cheap enough to key a cache on every run. Stepping over a 260k-string vocabulary
    still costs 0.15 s of CPU, so the digest is remembered (see _remembered): a no-change run
    reads no vocabulary."""
    def digest(data) -> str:
        end = _read(data, ())[1]
        with memoryview(data) as view:
            return hashlib.sha256(view[:end]).hexdigest()

    from generator.files import is_sha256

    return _remembered(path, "header", digest, is_sha256)


def _remembered(path: Path, what: str, compute, valid):
    """compute(the mapped file), remembered under the file's identity (files.remembered): a GGUF
    is read once per change, not once per run."""
    from generator.files import remembered

    return remembered(path, what, lambda p: _mapped(p, compute), valid)


def _mapped(path: Path, use):
    path = Path(path)
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return use(data)
    except (OSError, ValueError, UnicodeDecodeError, struct.error) as error:
        reason = getattr(error, "strerror", None) or " ".join(str(error).split()) or type(error).__name__
        raise GoldensError(f"{path}: not a readable GGUF file ({reason})") from None


def _read(data, prefixes: tuple[str, ...]) -> tuple[dict[str, Any], int]:
    """(the values asked for, the offset where the key-value pairs end)."""
    header = _Header(data)
    if bytes(data[:4]) != MAGIC:
        raise ValueError("no GGUF magic")
    header.at = 4
    version = header.take("I")
    if version & 0xFFFF == 0:  # written on a machine of the other byte order
        header.order = ">"
        header.at = 4
        version = header.take("I")
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version} (this reader knows {', '.join(map(str, VERSIONS))})")
    header.take("Q")  # tensor count: the tensors are never read
    out = {}
    for _ in range(header.take("Q")):
        key = header.string()
        kind = header.take("I")
        value = header.value(kind, keep=key.startswith(prefixes))
        if value is not None and key.startswith(prefixes):
            out[key] = value
    return out, header.at


def chat_templates(path: Path) -> dict[str, str]:
    """The chat templates a GGUF embeds: "default" (`tokenizer.chat_template`) and named ones
    (`tokenizer.chat_template.<name>`), sorted by name."""
    meta = _remembered(path, "chat_templates", lambda data: _read(data, ("tokenizer.chat_template",))[0],
                       lambda known: isinstance(known, dict))
    templates = {}
    for key, value in meta.items():
        if not isinstance(value, str):
            continue
        if key == "tokenizer.chat_template":
            templates["default"] = value
        elif key.startswith("tokenizer.chat_template."):
            templates[key.removeprefix("tokenizer.chat_template.")] = value
    return dict(sorted(templates.items()))
