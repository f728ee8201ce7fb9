"""o200k_base.tiktoken rebuilt from a registry package, for openai-harmony with no network.

openai-harmony loads `o200k_base.tiktoken` from `TIKTOKEN_ENCODINGS_BASE` (else it downloads
it, which fails here) and checks its sha256 against the digest compiled into it. npm's
`js-tiktoken` ships the same ranks in a compressed form (`dist/ranks/o200k_base.js`: lines of
`<prefix> <first rank> <base64 token> <base64 token> ...`, ranks consecutive from the first),
which js-tiktoken itself expands. Expanding it the same way and writing the `<base64> <rank>\n`
lines tiktoken reads gives a file whose sha256 is checked against harmony's before it is used:
a package that shipped other ranks is an error, never a silently different tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

from generator.errors import GoldensError
from generator.files import build_once, cache_dir, read_text, sha256_of
from generator.sources import pack

JS_TIKTOKEN = pack.Artifact(
    "npm", "js-tiktoken", "1.0.21",
    "3b1f24b185565ca9a8d8f51466dfc4f99d67f1f05bc009258710ddb7a8d810fa",
)
# The digest openai-harmony checks the file against (compiled into openai_harmony.abi3.so,
# src/tiktoken_ext/public_encodings.rs), and tiktoken's own for o200k_base.
O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_BASE = "o200k_base.tiktoken"


def expand(compressed: str) -> bytes:
    """js-tiktoken's compressed ranks as the .tiktoken file: one `<base64 token> <rank>` line
    per rank, in rank order; a gap or a repeated rank is an error."""
    ranks: dict[int, str] = {}
    for number, line in enumerate(compressed.split("\n"), 1):
        if not line:
            continue
        _prefix, first, *tokens = line.split(" ")
        if not first.isdigit():
            raise GoldensError(f"js-tiktoken ranks line {number}: {first[:20]!r} is not a rank")
        for offset, token in enumerate(tokens):
            rank = int(first) + offset
            if rank in ranks:
                raise GoldensError(f"js-tiktoken ranks line {number}: rank {rank} given twice")
            ranks[rank] = token
    if sorted(ranks) != list(range(len(ranks))):
        raise GoldensError("js-tiktoken ranks: the ranks are not consecutive from 0")
    return "".join(f"{ranks[rank]} {rank}\n" for rank in range(len(ranks))).encode("ascii")


def o200k_base_dir() -> Path:
    """A directory holding o200k_base.tiktoken (for TIKTOKEN_ENCODINGS_BASE), rebuilt once from
    the pinned js-tiktoken and checked against harmony's sha256."""
    target = cache_dir() / "tiktoken" / f"js-tiktoken-{JS_TIKTOKEN.version}" / O200K_BASE
    target.parent.mkdir(parents=True, exist_ok=True)

    def build(tmp: Path) -> None:
        module = pack.fetch(JS_TIKTOKEN) / "package" / "dist" / "ranks" / "o200k_base.js"
        source = read_text(module)
        head = "export default "
        if not source.startswith(head):
            raise GoldensError(f"{JS_TIKTOKEN.label}: {module.name} is not `export default {{...}}`")
        try:
            ranks = json.loads(source[len(head):].strip().rstrip(";"))["bpe_ranks"]
        except (ValueError, KeyError, TypeError) as error:
            raise GoldensError(f"{JS_TIKTOKEN.label}: {module.name}: no bpe_ranks ({error})") from None
        tmp.write_bytes(expand(ranks))
        actual = sha256_of(tmp)
        if actual != O200K_BASE_SHA256:
            raise GoldensError(f"{JS_TIKTOKEN.label}: the rebuilt {O200K_BASE} has sha256 {actual}, "
                               f"not o200k_base's {O200K_BASE_SHA256}")

    build_once(target, build)
    return target.parent
