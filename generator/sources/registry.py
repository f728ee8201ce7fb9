"""What a package registry has published: the PyPI simple index, read once per process.

An engine version is only meaningful if it was published: `NAME@VERSION` specs, `bisect` ranges
and the llama.cpp sdists all ask this module, which reads PEP 691 JSON from the index pip and
uv are configured with (so no host is hard-coded and a mirror is honoured). `index_config`
reads that configuration the way pip does (its config files, then PIP_* and UV_* variables)
without importing pip, which a uv-made venv does not have, and venvs are installed with it.
"""

from __future__ import annotations

import configparser
import functools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from generator import heavy
from generator.errors import GoldensError


@dataclass(frozen=True)
class File:
    """One file the index serves for a project: name, version, sha256 and download URL."""

    filename: str
    version: str
    sha256: str
    url: str


DEFAULT_INDEX = "https://pypi.org/simple"  # pip's and uv's default


@dataclass(frozen=True)
class IndexConfig:
    """Where packages come from, as pip would look: one index, extra indexes, find-links
    locations, constraint files and a CA bundle."""

    index_url: str = DEFAULT_INDEX
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    constraints: tuple[str, ...] = ()
    cert: str | None = None
    sources: tuple[str, ...] = field(default=(), compare=False)  # the files and variables read

    def uv_args(self) -> list[str]:
        """`uv pip install` options for the same packages pip would pick: uv reads no pip.conf,
        and by default takes a package from the first index that has it, where pip merges all."""
        args = ["--index-url", self.index_url, "--index-strategy", "unsafe-best-match"]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for place in self.find_links:
            args += ["--find-links", place]
        for path in self.constraints:
            args += ["--constraint", path]
        return args


def _pip_config_files() -> list[Path]:
    """pip's configuration files in its order of loading (a later one wins): global, user, site,
    then PIP_CONFIG_FILE; PIP_CONFIG_FILE=os.devnull loads none."""
    named = os.environ.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    dirs = (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    files = [Path(d) / "pip" / "pip.conf" for d in dirs if d] + [Path("/etc/pip.conf")]
    home = Path(os.path.expanduser("~"))
    files += [home / ".pip" / "pip.conf",
              Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "pip" / "pip.conf",
              Path(sys.prefix) / "pip.conf"]
    if named:
        files.append(Path(named))
    return files


def _split(value: str) -> list[str]:
    return [item for item in value.split() if item]


@functools.lru_cache(maxsize=None)
def index_config() -> IndexConfig:
    """The configuration pip would use here, with uv's own variables on top (UV_DEFAULT_INDEX,
    UV_INDEX_URL, UV_INDEX, UV_EXTRA_INDEX_URL, UV_FIND_LINKS): read once per process."""
    values: dict[str, str] = {}
    sources: list[str] = []
    for path in _pip_config_files():
        parser = configparser.RawConfigParser()
        try:
            if not parser.read(path, encoding="utf-8"):
                continue
        except (configparser.Error, UnicodeDecodeError, OSError):
            continue  # pip itself would refuse it; the index lookup says what failed
        sources.append(str(path))
        for section in ("global", "install"):  # pip: the command's own section overrides global
            if parser.has_section(section):
                values.update({key.replace("_", "-"): value for key, value in parser.items(section)})
    for key in ("index-url", "extra-index-url", "find-links", "constraint", "cert"):
        variable = "PIP_" + key.upper().replace("-", "_")
        if os.environ.get(variable):
            values[key], _ = os.environ[variable], sources.append(variable)
    index = values.get("index-url", DEFAULT_INDEX)
    for variable in ("UV_INDEX_URL", "UV_DEFAULT_INDEX"):  # the later name wins, as in uv
        if os.environ.get(variable):
            index, _ = os.environ[variable], sources.append(variable)
    extras = _split(values.get("extra-index-url", ""))
    for variable in ("UV_EXTRA_INDEX_URL", "UV_INDEX"):
        extras += _split(os.environ.get(variable, ""))
    links = _split(values.get("find-links", "")) + _split(os.environ.get("UV_FIND_LINKS", ""))
    return IndexConfig(
        index_url=index.rstrip("/"), extra_index_urls=tuple(dict.fromkeys(extras)),
        find_links=tuple(dict.fromkeys(links)), constraints=tuple(_split(values.get("constraint", ""))),
        cert=values.get("cert") or None, sources=tuple(sources),
    )


def simple_index() -> str:
    """The index pip and uv are configured with (see index_config), PyPI by default."""
    return index_config().index_url


@functools.lru_cache(maxsize=None)
def _listing(project: str, transport=None) -> dict:
    from generator import http
    from generator.errors import EngineError
    from generator.json_reader import load_json

    url = f"{simple_index()}/{project}/"
    heavy.require(f"{project}: reading the package index")
    try:
        status, raw = http.fetch(url, where=f"{project}: cannot read the package index {simple_index()}",
                                 timeout=120, accept="application/vnd.pypi.simple.v1+json",
                                 transport=transport or http.DEFAULT)
    except EngineError as error:
        raise GoldensError(str(error)) from None
    if status == 404:
        raise GoldensError(f"{project}: not on the package index {simple_index()}")
    if status != 200:
        raise GoldensError(f"{project}: package index answered HTTP {status}")
    listing = load_json(raw, f"{project}: the package index's listing")
    if not isinstance(listing, dict):
        raise GoldensError(f"{project}: the package index's listing is not a JSON object")
    return listing


def files(project: str, transport=None) -> list[File]:
    """Every non-yanked file of `project`, with the version its filename carries (`transport`:
    how the index is asked, http.DEFAULT unless given)."""
    listing = _listing(project, transport)
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


def download(file: File, into: Path, transport=None) -> Path:
    """`file` saved under `into`, its sha256 checked against the index's (progress on stderr:
    a llama.cpp sdist is 100+ MB)."""
    from generator import http, progress
    from generator.errors import EngineError
    from generator.files import sha256_of

    path = into / file.filename
    heavy.require(f"downloading {file.filename}")
    try:
        with open(path, "wb") as out, progress.long_work(f"downloading {file.filename}") as work:
            done = 0

            def write(headers: dict[str, str], chunk: bytes) -> None:
                nonlocal done
                out.write(chunk)
                done += len(chunk)
                size = int(headers.get("content-length") or 0)
                work.update(f"{done / 1e6:.0f} MB" + (f" of {size / 1e6:.0f} MB" if size else ""))

            status, _ = http.fetch(file.url, where=f"{file.filename}: cannot download", sink=write,
                                   transport=transport or http.DEFAULT)
            if status != 200:
                raise GoldensError(f"{file.filename}: cannot download (HTTP {status})")
    except EngineError as error:
        raise GoldensError(str(error)) from None
    except OSError as error:
        raise GoldensError(f"{file.filename}: cannot download ({error})") from None
    digest = sha256_of(path)
    if digest != file.sha256:
        raise GoldensError(f"{file.filename}: sha256 {digest} is not the index's {file.sha256}")
    return path


def download_pinned(project: str, sha256: str, into: Path, label: str, filename: str | None = None) -> Path:
    """The file of `project` whose sha256 is the pinned one (and, given `filename`, so named),
    saved under `into`; `download` checks the bytes against the index's digest, which is the pin."""
    entry = next((f for f in files(project) if f.sha256 == sha256), None)
    if entry is None or (filename is not None and entry.filename != filename):
        raise GoldensError(f"{label}: no {filename or 'file'} with the pinned sha256 on the package index")
    return download(entry, into)


def _filename_version(filename: str) -> str | None:
    """The version an sdist or wheel filename carries, or None for any other file."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        return str(parse_sdist_filename(filename)[1])
    except (InvalidSdistFilename, InvalidWheelFilename):
        return None
