"""The request schemas engines accept, read from the engines themselves: the catalogue the
derived dialects are generated from (generator/config/derived.py, docs/dialects.md).

- the `openai` package's chat-completions request types and vLLM's request and message models,
  read inside the vLLM venv (schema_worker.py: the openai release vLLM pins);
- mistral-common's request models (pydantic), in this process;
- llama.cpp's OpenAI-compatible parser: the keys its message, tool and body parsers read
  (common/chat.cpp, tools/server/server-common.cpp of the pinned source);
- JSON Schema draft 2020-12's keywords, from its vocabularies' meta-schemas as the
  `jsonschema-specifications` package ships them, each with the type its meta-schema gives.

The catalogue is written to `requests/schema.json` and committed: the generator reads the file,
never the engines, so a regenerate is reproducible; run this again when an engine is bumped and
review the diff (`python -m generator.coverage.schemas [--out FILE]`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from generator.errors import GoldensError

CATALOGUE = Path("requests") / "schema.json"

# the functions of llama.cpp whose JSON keys are the body a client may send
LLAMA_PARSERS = (
    ("common/chat.cpp", "common_chat_msgs_parse_oaicompat"),
    ("common/chat.cpp", "common_chat_tools_parse_oaicompat"),
    ("tools/server/server-common.cpp", "oaicompat_chat_params_parse"),
)


def _function_text(text: str, name: str) -> str:
    """The body of the C++ function `name` (from its definition to its matching brace)."""
    match = re.search(rf"^[^\n;]*\b{name}\s*\([^;{{]*\)\s*{{", text, re.M)
    if match is None:
        raise GoldensError(f"llama.cpp source: no definition of {name}")
    depth, start = 0, match.end() - 1
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    return text[start:]


def llama_keys(tree: Path) -> dict[str, list[str]]:
    """Per parser function, the JSON keys it reads (`.at("k")`, `.contains("k")`, `.find("k")`,
    `json_value(x, "k", ...)`, `x["k"]`)."""
    out = {}
    for path, name in LLAMA_PARSERS:
        body = _function_text((tree / path).read_text(encoding="utf-8", errors="replace"), name)
        keys = set(re.findall(r'(?:\.at|\.contains|\.find|\.count|json_value\(\s*\w+\s*,)\s*\(?\s*"([A-Za-z_$][\w$]*)"', body))
        keys |= set(re.findall(r'\[\s*"([A-Za-z_$][\w$]*)"\s*\]', body))
        out[f"{path}:{name}"] = sorted(keys)
    return out


def json_schema_keywords() -> dict[str, Any]:
    """Draft 2020-12's keywords by vocabulary, each with what its meta-schema says its value is."""
    import jsonschema_specifications

    root = Path(jsonschema_specifications.__file__).parent / "schemas" / "draft202012" / "vocabularies"
    out: dict[str, Any] = {}
    for path in sorted(root.iterdir()):
        schema = json.loads(path.read_text(encoding="utf-8"))
        definitions = schema.get("$defs", {})
        for keyword, spec in sorted((schema.get("properties") or {}).items()):
            out[keyword] = {"vocabulary": path.name, "value": _value_kind(spec, definitions)}
    return out


def _value_kind(spec: Any, definitions: dict[str, Any]) -> str:
    if not isinstance(spec, dict):
        return "any"
    if "$dynamicRef" in spec or spec.get("$ref") == "meta/core#/$defs/uriReferenceString":
        return "schema" if "$dynamicRef" in spec else "uri"
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        if name in ("schemaArray",):
            return "schema-array"
        if name in ("nonNegativeInteger", "nonNegativeIntegerDefault0"):
            return "count"
        if name in ("stringArray",):
            return "string-array"
        if name in ("simpleTypes",):
            return "type"
        inner = definitions.get(name)
        return _value_kind(inner, definitions) if inner else name
    kind = spec.get("type")
    if kind == "object" and "additionalProperties" in spec:
        return "schema-map" if isinstance(spec["additionalProperties"], dict) and "$dynamicRef" in spec["additionalProperties"] \
            else "string-array-map"
    if isinstance(kind, list):
        return "|".join(kind)
    return kind or ("any" if "anyOf" not in spec else "type-or-types")


def mistral_common_types() -> dict[str, Any]:
    """mistral-common's request models, described as schema_worker describes pydantic models."""
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import schema_worker  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    import mistral_common
    from mistral_common.protocol.instruct import messages
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    found: dict[str, Any] = {}
    schema_worker.describe(ChatCompletionRequest, found)
    for name in ("SystemMessage", "UserMessage", "AssistantMessage", "ToolMessage"):
        schema_worker.describe(getattr(messages, name), found)
    return {"version": mistral_common.__version__, "types": found}


def extract(config) -> dict[str, Any]:
    """The whole catalogue (needs the vLLM venv and the pinned llama.cpp source)."""
    from generator.engines.vllm.coverage import version as vllm_version
    from generator.engines.vllm.server import vllm_python
    from generator.sources import pack

    python = vllm_python(vllm_version(config))
    result = subprocess.run([str(python), str(Path(__file__).with_name("schema_worker.py"))],
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise GoldensError(f"schema worker failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}")
    engines = json.loads(result.stdout)
    if engines["vllm"].get("error"):
        raise GoldensError(f"schema worker: vLLM's types: {engines['vllm']['error']}")
    return {
        "about": "the request schemas engines accept (generator/coverage/schemas.py); the derived "
                 "dialects are generated from this file (generator/config/derived.py)",
        "openai": engines["openai"], "vllm": engines["vllm"], "mistral-common": mistral_common_types(),
        "llama.cpp": {"build": pack.LLAMA_CPP_BUILD, "keys": llama_keys(pack.llama_cpp_source())},
        "json-schema": {"draft": "2020-12", "keywords": json_schema_keywords()},
    }


def main(argv: list[str]) -> int:
    from generator import files
    from generator.config import models
    from generator.errors import one_line

    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else CATALOGUE
    try:
        catalogue = extract(models.load(Path("models.yaml")))
        files.atomic_write(out, json.dumps(catalogue, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    except GoldensError as error:
        print(f"goldens: error: {one_line(str(error))}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
