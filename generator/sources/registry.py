"""What a package registry has published: the PyPI simple index, read once per process.

An engine version is only meaningful if it was published: `NAME@VERSION` specs, `bisect` ranges
and the llama.cpp sdists all ask this module, which reads PEP 691 JSON from pip's own index (so
no host is hard-coded and a mirror configured for pip is honoured).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from generator.errors import GoldensError


@dataclass(frozen=True)
class File:
    """One file the index serves for a project: name, version, sha256 and download URL."""

    filename: str
    version: str
    sha256: str
    url: str


def simple_index() -> str:
    """pip's own index (PIP_INDEX_URL, else pip's default)."""
    configured = os.environ.get("PIP_INDEX_URL")
    if configured:
        return configured.rstrip("/")
    from pip._internal.models.index import PyPI  # pip's default index

    return PyPI.simple_url.rstrip("/")


@functools.lru_cache(maxsize=None)
def _listing(project: str) -> dict:
    url = f"{simple_index()}/{project}/"
    request = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            raise GoldensError(f"{project}: not on the package index {simple_index()}") from None
        raise GoldensError(f"{project}: package index answered HTTP {error.code}") from None
    except (OSError, ValueError) as error:
        raise GoldensError(f"{project}: cannot read the package index ({error})") from None


def files(project: str) -> list[File]:
    """Every non-yanked file of `project`, with the version its filename carries."""
    listing = _listing(project)
    found = []
    for entry in listing.get("files", []):
        if entry.get("yanked"):
            continue
        sha256 = entry.get("hashes", {}).get("sha256")
        version = _filename_version(entry["filename"])
        if sha256 and version:
            found.append(File(entry["filename"], version, sha256, entry["url"]))
    return found


def versions(project: str) -> list[str]:
    """Published versions of `project`, oldest first (PEP 440 order)."""
    listed = _listing(project).get("versions") or sorted({f.version for f in files(project)})
    parsed = []
    for text in listed:
        try:
            parsed.append((Version(text), text))
        except InvalidVersion:
            continue
    return [text for _, text in sorted(parsed)]


def nearest(published: list[str], wanted: str, count: int = 3) -> list[str]:
    """The published versions closest to `wanted` (below and above it), for an error line."""
    try:
        target = Version(wanted)
    except InvalidVersion:
        return published[-count:]
    if not target.is_prerelease:  # a release is near releases, not release candidates
        published = [v for v in published if not Version(v).is_prerelease]
    below = [v for v in published if Version(v) < target][-count:]
    above = [v for v in published if Version(v) > target][:count]
    return below[-((count + 1) // 2):] + above[: count // 2 + 1]


def require_published(project: str, version: str, *, label: str | None = None) -> None:
    """GoldensError naming the nearest published versions when `version` never was."""
    published = versions(project)
    if version in published:
        return
    near = ", ".join(nearest(published, version))
    raise GoldensError(
        f"{label or project} {version} was never published on {simple_index()} "
        f"(nearest published: {near})"
    )


def download(file: File, into: Path) -> Path:
    """`file` saved under `into`, its sha256 checked against the index's."""
    path = into / file.filename
    try:
        with urllib.request.urlopen(file.url, timeout=600) as response, open(path, "wb") as out:
            shutil.copyfileobj(response, out)
    except OSError as error:
        raise GoldensError(f"{file.filename}: cannot download ({error})") from None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != file.sha256:
        raise GoldensError(f"{file.filename}: sha256 {digest.hexdigest()} is not the index's {file.sha256}")
    return path


def _filename_version(filename: str) -> str | None:
    """The version an sdist or wheel filename carries, or None for any other file."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        return str(parse_sdist_filename(filename)[1])
    except (InvalidSdistFilename, InvalidWheelFilename):
        return None
