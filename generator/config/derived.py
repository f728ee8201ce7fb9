"""Derived dialects: the request variations generated from the schemas engines accept.

The hand-written dialects (dialects.py) were each added because an outside body showed a cause;
these are generated from the catalogue `requests/schema.json` (coverage/schemas.py: the `openai`
package's chat-completions types, vLLM's request and message models, mistral-common's request
models, the keys llama.cpp's OpenAI-compatible parser reads, JSON Schema 2020-12's keywords).

Every field a client may send becomes a *factor* of the conversation it appears in: a message
field per role, a tool-call field, a tool-definition field, a keyword of a tool's parameter
schema, a request field engines act on. Its *levels* are what the catalogue allows or a client
may send outside it: absent, null, empty, each alternative type any source allows (a string,
text parts, an object of the named type, each literal), each content-part type, each spelling of
roles. A level some source accepts is *valid*; one no source accepts (null where every schema
says string) is *invalid*.

The rows: for each built-in conversation, a covering array of strength 2 over its valid levels
(every pair of levels of two factors appears in some row, in far fewer rows than the product),
plus one row per invalid level with every other factor as sent (an invalid value masks what the
others would reach: the engine refuses at the first), and one row per level that is a kind of
thing rather than a spelling of it (each content-part type, each JSON Schema keyword: combined,
one refused part or keyword would hide every other). The array is built greedily from a fixed
seed, so the same catalogue gives the same rows. Each row is a Dialect named
`gen-<shape initials><NNN>` on its one shape; which of them a model keeps is the dialects'
choice (dialects.choose: only what reaches something the matrix does not), locked in
models.dialects.lock. The hand-written dialects come first in that choice: they are the seeds.
The rows themselves are locked in requests/schema.derived.lock (generator/locks.py), rewritten
by `python -m generator.config.derived`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generator import locks

Request = dict[str, Any]
CATALOGUE = Path(__file__).resolve().parents[2] / "requests" / "schema.json"
SEED = 41  # the covering array's tie-breaks; changing it changes the rows (and the lock's choice)
SHAPES = ("plain", "multi-turn", "tools-reduced", "tool-result-json-args", "parallel-tool-calls",
          "reasoning-history")
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
OPENAI_MESSAGE = {"system": "ChatCompletionSystemMessageParam", "developer": "ChatCompletionDeveloperMessageParam",
                  "user": "ChatCompletionUserMessageParam", "assistant": "ChatCompletionAssistantMessageParam",
                  "tool": "ChatCompletionToolMessageParam", "function": "ChatCompletionFunctionMessageParam"}
MISTRAL_MESSAGE = {"system": "SystemMessage", "user": "UserMessage", "assistant": "AssistantMessage",
                   "tool": "ToolMessage"}
TEXT = "Be brief."
# where a part type or schema keyword is tried (once): content parts on `plain` (system and user
# messages), keywords on `tools-reduced`
SINGLES = {"content": "plain", "parameters": "tools-reduced"}
LOCK = locks.DERIVED.path(CATALOGUE)  # requests/schema.derived.lock


@dataclass(frozen=True)
class Level:
    name: str
    apply: Callable[[Request], bool]  # rewrites the request in place; False: nothing to rewrite
    valid: bool
    single: bool = False  # tried alone (one row each), not combined: see rows()


@dataclass(frozen=True)
class Factor:
    name: str
    levels: tuple[Level, ...]


# ------------------------------------------------------------------ the catalogue


@functools.lru_cache(maxsize=2)
def catalogue(path: Path = CATALOGUE) -> dict[str, Any]:
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def _kinds(types: dict[str, Any], type_name: str, key: str) -> tuple[set[str], bool] | None:
    """(kinds, required) of `key` in one source's type, None when the type has no such key."""
    entry = (types.get(type_name) or {}).get(key)
    return (set(entry["kinds"]), bool(entry["required"])) if entry else None


def field_kinds(cat: dict[str, Any], role: str, key: str) -> tuple[set[str], bool]:
    """Every kind any source allows for a message key of a role, and whether all that know it
    require it."""
    found, required = set(), []
    for source, names in (("openai", OPENAI_MESSAGE), ("mistral-common", MISTRAL_MESSAGE)):
        got = _kinds(cat.get(source, {}).get("types", {}), names.get(role, ""), key)
        if got:
            found |= got[0]
            required.append(got[1])
    got = _kinds(cat.get("vllm", {}).get("types", {}), "CustomChatCompletionMessageParam", key)
    if got:
        found |= got[0]
        required.append(got[1])
    llama = set().union(*(set(v) for k, v in cat.get("llama.cpp", {}).get("keys", {}).items()
                          if "msgs_parse" in k)) if cat.get("llama.cpp") else set()
    if key in llama:
        found.add("string")
    return found, bool(required) and all(required)


def message_keys(cat: dict[str, Any], role: str) -> list[str]:
    keys = set()
    for source, names in (("openai", OPENAI_MESSAGE), ("mistral-common", MISTRAL_MESSAGE)):
        keys |= set((cat.get(source, {}).get("types", {}).get(names.get(role, "")) or {}))
    for name, found in cat.get("llama.cpp", {}).get("keys", {}).items():
        if "msgs_parse" in name:
            keys |= {k for k in found if k not in ("text", "type", "function", "arguments", "id")}
    return sorted(keys - {"role"})


# ------------------------------------------------------------------ values


def _text_parts(text: str, n: int) -> list[dict[str, str]]:
    if n == 1 or " " not in text:
        return [{"type": "text", "text": text}]
    cut = text.find(" ", len(text) // 2)
    cut = cut if cut > 0 else text.find(" ")
    return [{"type": "text", "text": text[:cut]}, {"type": "text", "text": text[cut + 1:]}]


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " ".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
    return TEXT


def sample(cat_types: dict[str, Any], kind: str, key: str, base: Any, depth: int = 0) -> Any:
    """A value of `kind` for `key`, made from the value the conversation sends (`base`)."""
    if kind == "null":
        return None
    if kind == "string":
        if key == "arguments":
            return json.dumps(base) if isinstance(base, dict) else (base if isinstance(base, str) else "{}")
        return _text_of(base) if base is not None else {"name": "alice"}.get(key, TEXT)
    if kind == "boolean":
        return not base if isinstance(base, bool) else True
    if kind in ("integer", "number"):
        return 1 if kind == "integer" else 0.5
    if kind.startswith("literal:"):
        return json.loads(kind.split(":", 1)[1])
    if kind == "object":
        return base if isinstance(base, dict) else ({} if key != "arguments" else json.loads(base or "{}"))
    if kind.startswith("array:"):
        return _text_parts(_text_of(base), 1) if "ContentPartText" in kind else []
    if kind.startswith("type:"):
        return typed(cat_types, kind[5:], depth)
    return base


def typed(cat_types: dict[str, Any], name: str, depth: int = 0) -> Any:
    """A minimal object of a named type: its required keys (all keys when none is required),
    each from its first kind."""
    fields = cat_types.get(name) or {}
    wanted = {k: v for k, v in fields.items() if v["required"]} or fields
    out = {}
    for key, entry in sorted(wanted.items()):
        kinds = sorted(entry["kinds"], key=lambda k: (k == "null", k.startswith("type:") and depth > 2, k))
        out[key] = sample(cat_types, kinds[0], key, None, depth + 1) if depth < 4 else None
    return out


# ------------------------------------------------------------------ factors


def _on_role(role: str, change: Callable[[dict[str, Any]], bool]) -> Callable[[Request], bool]:
    def apply(request: Request) -> bool:
        done = [change(m) for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == role]
        return any(done)
    return apply


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], bool]:
    def change(item: dict[str, Any]) -> bool:
        if key in item and item[key] == value:
            return False
        item[key] = copy.deepcopy(value)
        return True
    return change


def _drop(key: str) -> Callable[[dict[str, Any]], bool]:
    def change(item: dict[str, Any]) -> bool:
        return item.pop(key, ...) is not ...
    return change


def _from_base(key: str, make: Callable[[Any], Any]) -> Callable[[dict[str, Any]], bool]:
    def change(item: dict[str, Any]) -> bool:
        value = make(item.get(key))
        if key in item and item[key] == value:
            return False
        item[key] = value
        return True
    return change


def message_factors(cat: dict[str, Any]) -> list[Factor]:
    """One factor per role and message key the sources know."""
    types = cat.get("openai", {}).get("types", {}) | cat.get("vllm", {}).get("types", {})
    out = []
    for role in ROLES:
        for key in message_keys(cat, role):
            kinds, required = field_kinds(cat, role, key)
            levels = [Level("absent", _on_role(role, _drop(key)), not required)]
            levels.append(Level("null", _on_role(role, _set(key, None)), "null" in kinds))
            for kind in sorted(kinds - {"null"}):
                if kind.startswith("array:"):
                    parts = kind[6:].split("|")
                    levels.append(Level("empty-list", _on_role(role, _set(key, [])), True))
                    if "type:ChatCompletionContentPartTextParam" in parts and key == "content":
                        for n in (1, 2):
                            levels.append(Level(f"text-parts-{n}", _on_role(role, _from_base(
                                key, lambda base, n=n: _text_parts(_text_of(base), n))), True))
                        for part in sorted(p for p in parts if p.startswith("type:") and "Text" not in p):
                            value = typed(types, part[5:])
                            levels.append(Level(f"part-{part[5:]}", _on_role(role, _from_base(
                                key, lambda base, value=value: _text_parts(_text_of(base), 1) + [value])), True,
                                single=True))
                elif kind == "string":
                    levels.append(Level("empty-string", _on_role(role, _set(key, "")), True))
                    levels.append(Level("string", _on_role(role, _from_base(
                        key, lambda base, key=key: sample(types, "string", key, base))), True))
                elif kind.startswith("type:") or kind == "object" or kind.startswith("literal:"):
                    value = sample(types, kind, key, None)
                    levels.append(Level(kind.split(":", 1)[-1][:40], _on_role(role, _set(key, value)), True))
                else:
                    levels.append(Level(kind, _on_role(role, _set(key, sample(types, kind, key, None))), True))
            out.append(Factor(f"{role}.{key}", tuple(_unique(levels))))
        spellings = {"system": "developer", "developer": "system"}  # the same message type's two roles
        if role in spellings:
            out.append(Factor(f"{role}.role", (Level(spellings[role], _on_role(role, _set("role", spellings[role])),
                                                     True),)))
    return out


def _calls(request: Request) -> list[dict[str, Any]]:
    return [c for m in request.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant"
            for c in m.get("tool_calls") or [] if isinstance(c, dict)]


def _on_calls(change: Callable[[dict[str, Any]], bool], inner: bool = False) -> Callable[[Request], bool]:
    def apply(request: Request) -> bool:
        items = [c.get("function") for c in _calls(request)] if inner else _calls(request)
        return any([change(i) for i in items if isinstance(i, dict)])
    return apply


def call_factors(cat: dict[str, Any]) -> list[Factor]:
    types = cat.get("openai", {}).get("types", {})
    out = []
    for type_name, inner in (("ChatCompletionMessageFunctionToolCallParam", False), ("Function", True)):
        for key, entry in sorted((types.get(type_name) or {}).items()):
            if key == "function":
                continue
            kinds = set(entry["kinds"])
            levels = [Level("absent", _on_calls(_drop(key), inner), False),
                      Level("null", _on_calls(_set(key, None), inner), "null" in kinds),
                      Level("empty-string", _on_calls(_set(key, ""), inner), "string" in kinds)]
            if key == "arguments":  # the shapes real clients send outside the type: an object
                levels += [Level("object", _on_calls(_from_base(key, lambda b: json.loads(b) if isinstance(b, str)
                                                                 and b.strip().startswith("{") else b), inner), False),
                           Level("compact", _on_calls(_from_base(key, lambda b: json.dumps(
                               json.loads(b) if isinstance(b, str) else b, separators=(",", ":"))), inner), True)]
            for kind in sorted(k for k in kinds if k.startswith("literal:")):
                levels.append(Level(kind[8:].strip('"'), _on_calls(_set(key, json.loads(kind[8:])), inner), True))
            out.append(Factor(f"tool_calls.{'function.' if inner else ''}{key}", tuple(_unique(levels))))
    return out


def _on_tools(change: Callable[[dict[str, Any]], bool], inner: bool = False) -> Callable[[Request], bool]:
    def apply(request: Request) -> bool:
        tools = [t for t in request.get("tools") or [] if isinstance(t, dict)]
        items = [t.get("function") for t in tools] if inner else tools
        return any([change(i) for i in items if isinstance(i, dict)])
    return apply


def tool_factors(cat: dict[str, Any]) -> list[Factor]:
    types = cat.get("openai", {}).get("types", {})
    vllm = cat.get("vllm", {}).get("types", {})
    mistral = cat.get("mistral-common", {}).get("types", {})
    out = []
    for type_names, inner in ((("ChatCompletionFunctionToolParam",), False), (("FunctionDefinition",), True)):
        keys: dict[str, set[str]] = {}
        for source, name in ((types, type_names[0]), (vllm, "ChatCompletionToolsParam" if not inner else "FunctionDefinition"),
                             (mistral, "Tool" if not inner else "Function")):
            for key, entry in (source.get(name) or {}).items():
                keys.setdefault(key, set()).update(entry["kinds"])
        for key, kinds in sorted(keys.items()):
            if key == "function" or key == "parameters":
                continue
            levels = [Level("absent", _on_tools(_drop(key), inner), key not in ("name",)),
                      Level("null", _on_tools(_set(key, None), inner), "null" in kinds)]
            if "string" in kinds:
                levels.append(Level("empty-string", _on_tools(_set(key, ""), inner), True))
            for kind in sorted(k for k in kinds if k not in ("null", "string")):
                value = sample(types | vllm, kind, key, None)
                levels.append(Level(kind.split(":", 1)[-1][:40], _on_tools(_set(key, value), inner), True))
            out.append(Factor(f"tools.{'function.' if inner else ''}{key}", tuple(_unique(levels))))
    return out


SCHEMA_VALUES = {  # by the kind the 2020-12 meta-schema gives a keyword's value
    "string": "x", "boolean": True, "number": 1, "count": 1, "array": ["a", "b"], "schema": {"type": "string"},
    "schema-array": [{"type": "string"}, {"type": "integer"}], "string-array": ["city"],
    "schema-map": {"x": {"type": "string"}}, "string-array-map": {"city": ["country"]}, "any": "a",
    "type-or-types": ["string", "null"], "uri": "https://example.com/schema",
}
# `required` names a parameter the conversation's tools do not require yet
SCHEMA_VALUES["string-array"] = ["city", "country"]
SCHEMA_OVERRIDES = {  # where a generic value would not be a schema a client writes
    "$ref": "#/$defs/city", "$defs": {"city": {"type": "string"}}, "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://example.com/weather", "pattern": "^[A-Z]", "format": "date", "enum": ["Paris", "Lyon"],
    "const": "Paris", "default": "Paris", "examples": ["Paris"], "contentMediaType": "text/plain",
    "contentEncoding": "base64", "$anchor": "city", "$dynamicAnchor": "city", "$dynamicRef": "#city",
    "$vocabulary": {"https://json-schema.org/draft/2020-12/vocab/core": True},
}
OBJECT_KEYWORDS = {"properties", "patternProperties", "additionalProperties", "required", "dependentRequired",
                   "dependentSchemas", "propertyNames", "maxProperties", "minProperties", "unevaluatedProperties",
                   "$defs", "$schema", "$id", "$vocabulary", "$comment"}


def schema_factor(cat: dict[str, Any]) -> list[Factor]:
    """Each JSON Schema keyword a client may put in a tool's parameters: on the parameters object
    (object keywords) or on its first property; `type` as a type list."""
    keywords = cat.get("json-schema", {}).get("keywords", {})
    levels = []
    for keyword, spec in sorted(keywords.items()):
        value = SCHEMA_OVERRIDES.get(keyword, SCHEMA_VALUES.get(spec["value"], "x"))

        def change(function: dict[str, Any], keyword=keyword, value=value) -> bool:
            parameters = function.get("parameters")
            if not isinstance(parameters, dict):
                return False
            if keyword in OBJECT_KEYWORDS:
                target = parameters
            else:
                props = parameters.get("properties") or {}
                if not props:
                    return False
                target = props[sorted(props)[0]]
            if target.get(keyword, ...) == value:
                return False
            target[keyword] = copy.deepcopy(value)
            return True
        levels.append(Level(keyword.lstrip("$"), _on_tools(change, inner=True), True, single=True))
    return [Factor("tools.function.parameters", tuple(levels))] if levels else []


def field_factors(cat: dict[str, Any]) -> list[Factor]:
    """The request fields engines act on (request.py ENGINE_FIELDS), from the openai types."""
    from generator.config.request import ENGINE_FIELDS

    types = cat.get("openai", {}).get("types", {})
    body = types.get("CompletionCreateParamsBase") or {}
    out = []
    for key in ENGINE_FIELDS:
        if key not in body:
            continue
        kinds = set(body[key]["kinds"])
        levels = [Level("null", _top(key, None), "null" in kinds)]
        for kind in sorted(kinds - {"null"}):
            value = sample(types, kind, key, None)
            if kind == "type:ChatCompletionNamedToolChoiceParam":
                value = {"type": "function", "function": {"name": "get_weather"}}
            levels.append(Level(kind.split(":", 1)[-1].strip('"')[:40], _top(key, value), True))
        out.append(Factor(key, tuple(_unique(levels))))
    return out


def _top(key: str, value: Any) -> Callable[[Request], bool]:
    def apply(request: Request) -> bool:
        if key in ("tool_choice", "parallel_tool_calls") and not request.get("tools"):
            return False
        request[key] = copy.deepcopy(value)
        return True
    return apply


def _unique(levels: list[Level]) -> list[Level]:
    seen, out = set(), []
    for level in levels:
        if level.name not in seen:
            seen.add(level.name)
            out.append(level)
    return out


def factors(cat: dict[str, Any]) -> list[Factor]:
    return [*message_factors(cat), *call_factors(cat), *tool_factors(cat), *schema_factor(cat), *field_factors(cat)]


# ------------------------------------------------------------------ the covering array


def covering_array(sizes: list[int], seed: int = SEED, tries: int = 8) -> list[tuple[int, ...]]:
    """Rows (one level index per factor) covering every pair of levels of every two factors,
    built greedily (AETG): each row the best of `tries` candidates, each candidate's factors
    filled in a seeded random order with the level covering most pairs still uncovered."""
    rng = random.Random(seed)
    n = len(sizes)
    uncovered = {(i, a, j, b) for i in range(n) for j in range(i + 1, n) for a in range(sizes[i]) for b in range(sizes[j])}
    rows: list[tuple[int, ...]] = []
    if n == 1:
        return [(a,) for a in range(sizes[0])]
    while uncovered:
        best, best_gain = None, -1
        first = next(iter(sorted(uncovered)))
        for _ in range(tries):
            row: dict[int, int] = {first[0]: first[1], first[2]: first[3]}
            order = [i for i in range(n) if i not in row]
            rng.shuffle(order)
            for i in order:
                def gain(a: int) -> int:
                    return sum(1 for j, b in row.items() if ((i, a, j, b) if i < j else (j, b, i, a)) in uncovered)
                scores = [gain(a) for a in range(sizes[i])]
                top = max(scores)
                row[i] = rng.choice([a for a in range(sizes[i]) if scores[a] == top])
            full = tuple(row[i] for i in range(n))
            covered = sum(1 for i in range(n) for j in range(i + 1, n) if (i, full[i], j, full[j]) in uncovered)
            if covered > best_gain:
                best, best_gain = full, covered
        assert best is not None
        rows.append(best)
        uncovered -= {(i, best[i], j, best[j]) for i in range(n) for j in range(i + 1, n)}
    return rows


# ------------------------------------------------------------------ rows as dialects


@dataclass(frozen=True)
class Row:
    name: str
    shape: str
    assignment: tuple[tuple[str, str], ...]  # (factor, level) changed from the conversation as sent


def _applicable(factor: Factor, request: Request) -> list[Level]:
    return [level for level in factor.levels if level.apply(copy.deepcopy(request))]


def rows(cat: dict[str, Any] | None = None, seed: int = SEED) -> list[Row]:
    """Every generated row, shape by shape: the pairwise rows of valid levels, then one row per
    invalid level."""
    from generator.config.shapes import build

    cat = catalogue() if cat is None else cat
    if not cat:
        return []
    all_factors = factors(cat)
    out = []
    for shape in SHAPES:
        base = build(shape, {})
        usable = [(f, _applicable(f, base)) for f in all_factors]
        valid = [(f, [lv for lv in levels if lv.valid and not lv.single]) for f, levels in usable]
        valid = [(f, levels) for f, levels in valid if levels]
        prefix = "".join(word[0] for word in shape.split("-"))
        named: list[tuple[tuple[str, str], ...]] = []
        if valid:
            # level 0 of each factor is "as sent": a row need not change every factor
            grid = covering_array([len(levels) + 1 for _, levels in valid], seed)
            for row in grid:
                assignment = tuple((f.name, levels[i - 1].name) for (f, levels), i in zip(valid, row) if i)
                if assignment:
                    named.append(assignment)
        for f, levels in usable:
            # a kind of thing (a part type, a schema keyword) once, on the conversation made for it
            named += [((f.name, lv.name),) for lv in levels
                      if not lv.valid or (lv.single and shape == SINGLES.get(f.name.split(".")[-1], shape))]
        for i, assignment in enumerate(named):
            out.append(Row(f"gen-{prefix}{i:03d}", shape, assignment))
    return out


@functools.lru_cache(maxsize=1)
def _factor_table() -> dict[str, Factor]:
    return {f.name: f for f in factors(catalogue())}


def apply(row: Row, request: Request) -> Request | None:
    """The row's levels applied to a copy of the conversation (None: the shape is not the row's,
    or nothing changed)."""
    table = _factor_table()
    out = copy.deepcopy(request)
    changed = False
    for factor, level in row.assignment:
        found = next((lv for lv in table[factor].levels if lv.name == level), None) if factor in table else None
        if found is not None:
            changed |= found.apply(out)
    return out if changed else None


def describe(row: Row) -> str:
    return "; ".join(f"{factor}={level}" for factor, level in row.assignment)


def digest(cat: dict[str, Any] | None = None) -> str:
    """The catalogue's sha256 (the lock records it: rows change when it does)."""
    cat = catalogue() if cat is None else cat
    return hashlib.sha256(json.dumps(cat, sort_keys=True).encode()).hexdigest()


# ------------------------------------------------------------------ the lock


def write_lock(catalogue_path: Path = CATALOGUE, seed: int = SEED) -> bool:
    """Generate the rows from the catalogue and write them beside it (generator/locks.py; one row
    a line, deterministic bytes); True when the bytes changed. The lock is what DIALECTS reads:
    generating takes seconds, reading none."""
    generated = rows(catalogue(), seed)
    return locks.write(locks.DERIVED, catalogue_path, {
        "catalogue_sha256": digest(), "seed": seed,
        "rows": [{"name": r.name, "shape": r.shape, "set": [list(a) for a in r.assignment]} for r in generated]})


def read_lock(catalogue_path: Path = CATALOGUE) -> list[Row]:
    """The locked rows ([] without a lock): requests/schema.derived.lock, or an older
    requests/derived.lock (generator/locks.py)."""
    data = locks.read(locks.DERIVED, catalogue_path) or {}
    return [Row(r["name"], r["shape"], tuple(tuple(a) for a in r["set"])) for r in data.get("rows", [])]


if __name__ == "__main__":  # what rewrites the lock (locks.DERIVED.written_by)
    print(f"{LOCK.name}: {'rewritten' if write_lock() else 'unchanged'}")
