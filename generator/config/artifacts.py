"""A registry package pinned by version and sha256: what every download of the pipeline names
(sources/pack.py's tokenizers and llama.cpp source, encoders, corpora, Transformers.js). Here,
in config, so a pin can be declared where models.yaml is checked without fetching anything.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Artifact:
    """A registry package pinned by version and the sha256 of the file the registry serves."""

    registry: str  # "npm" or "pypi-sdist"
    name: str
    version: str
    sha256: str

    @property
    def label(self) -> str:
        prefix = "npm" if self.registry == "npm" else "pypi"
        return f"{prefix}:{self.name}@{self.version}"
