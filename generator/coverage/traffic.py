"""A team's logged traffic as shapes: the smallest set of logged chat bodies that reaches
everything the whole log reaches.

What a body reaches is its features: the compiled template lines it executes for every model
that will render it (under every kwargs variant of that model's matrix), plus structural
features no template line may show (the role sequence, tool use, each role's content forms, the
template kwargs it sets, the generation flags). A greedy cover over those features keeps the
body adding the most new ones, earliest in the log on a tie, so duplicates never survive. A
malformed line is reported with its line number and skipped; the rest is still read."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator import canonical
from generator.config.request import validate_request
from generator.coverage.search import greedy, request_bytes
from generator.coverage.trace import Coverage, compiled, render_traced
from generator.errors import GoldensError
from generator.json_reader import load_json


@dataclass
class Body:
    name: str  # where it came from: "<file stem>-<line>" or the file's stem
    body: dict[str, Any]
    features: set = field(default_factory=set)


MAX_BODY = 16 * 2**20  # bytes of one logged body (a line of JSONL, or one JSON file)


def read_log(path: Path) -> tuple[list[Body], list[str]]:
    """Bodies from a JSONL file (one body per line, blank lines skipped) or a folder of JSON
    files (sorted by name), and one error line per malformed entry. Everything is read through
    files' bounded readers: a FIFO, a device or a folder named x.json is an error line, a body
    over MAX_BODY another, and a log of any length is read a line at a time."""
    from generator import files

    bodies, errors = [], []

    def entries():
        if path.is_dir():
            for entry in sorted(path.glob("*.json")):
                try:
                    yield entry.stem, entry, files.read_bytes(entry, limit=MAX_BODY)
                except GoldensError as error:
                    errors.append(str(error))
            return
        for number, line in files.read_lines(path, limit=MAX_BODY):
            if line is None:
                errors.append(f"{path}:{number}: more than the {MAX_BODY} bytes one body may hold")
            elif line.strip():
                yield f"{path.stem}-{number:04d}", f"{path}:{number}", line

    for name, where, data in entries():
        try:
            body = load_json(data, str(where))
            validate_request(body, str(where))
        except GoldensError as error:
            errors.append(str(error))
            continue
        bodies.append(Body(name=_safe(name), body=body))
    return bodies, errors


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") or "body"


def _form(content: Any) -> str:
    if content is None:
        return "null"
    if isinstance(content, str):
        return "empty" if content == "" else "string"
    if isinstance(content, list):
        return "parts:" + ",".join(sorted({str(p.get("type")) if isinstance(p, dict) else "?" for p in content}))
    return type(content).__name__


def structure(body: dict[str, Any]) -> set:
    """Structural features: what a body is made of, beyond the template lines it runs."""
    messages = body.get("messages") or []
    roles = tuple(m.get("role") for m in messages)
    features = {("roles", roles), ("last", roles[-1] if roles else None),
                ("generation", bool(body.get("add_generation_prompt", True)),
                 bool(body.get("continue_final_message", False))),
                ("tools", bool(body.get("tools"))), ("documents", bool(body.get("documents")))}
    for message in messages:
        role = message.get("role")
        features.add(("content", role, _form(message.get("content"))))
        calls = message.get("tool_calls") or []
        if calls:
            features.add(("tool_calls", min(len(calls), 3)))
            for call in calls:
                arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
                features.add(("arguments", type(arguments).__name__))
        for key in sorted(set(message) - {"role", "content", "tool_calls"}):
            features.add(("field", role, key))
    for key, value in sorted((body.get("chat_template_kwargs") or {}).items()):
        features.add(("kwarg", key, canonical.dumps(value)))
    return features


def _text_form(text: Any) -> tuple[str, ...]:
    """What of a text an engine's escaping or a template's tests may act on."""
    if not isinstance(text, str):
        return (type(text).__name__,)
    return tuple(sorted({"empty" if not text else "text", *(["newline"] if "\n" in text else []),
                         *(["markup"] if re.search(r"[<>&']", text) else []),
                         *(["non-ascii"] if not text.isascii() else [])}))


def schema_features(schema: Any, depth: int = 0, where: str = "parameters") -> set:
    """A tool's JSON schema as features: each keyword at its depth, each type spelling (JSON
    Schema's or not: `dict`, `float`), the kinds of enum, default and example values."""
    if not isinstance(schema, dict):
        return {("schema", where, depth, "not-an-object", type(schema).__name__)}
    out = set()
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(value, dict):
            out.add(("schema", where, depth, key))
            for inner in value.values():
                out |= schema_features(inner, min(depth + 1, 3), where)
        elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains") and isinstance(value, dict):
            out.add(("schema", where, depth, key))
            out |= schema_features(value, min(depth + 1, 3), where)
        elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
            out.add(("schema", where, depth, key))
            for inner in value:
                out |= schema_features(inner, min(depth + 1, 3), where)
        elif key == "type":
            out.add(("schema-type", json.dumps(value)))
        elif key in ("enum", "default", "examples", "const"):
            kinds = sorted({type(v).__name__ for v in value}) if key in ("enum", "examples") and isinstance(value, list) \
                else [type(value).__name__]
            out.add(("schema", where, depth, key, *kinds))
        elif key == "description":
            out.add(("schema", where, depth, key, *_text_form(value)))
        else:
            out.add(("schema", where, depth, key))
    return out


def tool_features(body: dict[str, Any]) -> set:
    """The tools a body sends, beyond whether it sends any: keys, name spellings, schemas."""
    out = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            out.add(("tool", "not-an-object"))
            continue
        out |= {("tool-key", key) for key in tool}
        function = tool.get("function") if isinstance(tool.get("function"), dict) else {}
        out |= {("function-key", key) for key in function}
        name = str(function.get("name", ""))
        out |= {("name-chars", kind) for kind, pattern in (("dot", r"\."), ("dash", "-"), ("digit", r"\d"),
                                                           ("upper", "[A-Z]"), ("space", r"\s"))
                if re.search(pattern, name)}
        out.add(("tool-description", *_text_form(function.get("description"))))
        if "parameters" in function:
            out |= schema_features(function["parameters"])
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            out.add(("text", message.get("role"), *_text_form(message.get("content"))))
    return out


def features_of(body: Body, renderers: list[tuple[Any, Any]], config) -> None:
    request = validate_request(json.loads(json.dumps(body.body)), body.name)
    body.features = structure(request) | tool_features(request)
    for model, source in renderers:
        for kwargs in model.variants.values():
            rendered = dict(request, chat_template_kwargs={**request["chat_template_kwargs"], **model.kwargs, **kwargs})
            body.features |= {("line", model.name, line) for line in render_traced(source, rendered, config.date)[1]}


def minimal(bodies: list[Body], base: set | None = None) -> list[Body]:
    """The greedy cover of the bodies' features; `base`: features already reached (a matrix's),
    so only bodies adding to it are kept."""
    kept = [body for body, _ in greedy(base or set(), bodies, covers=lambda body: body.features)]
    return sorted(kept, key=bodies.index)


def matrix_features(models: list, renderers: list[tuple[Any, Any]], config) -> set:
    """What the models' committed matrix cases reach, as import features: a corpus import keeps
    only bodies that reach something beyond it."""
    from generator.config.cases import model_cases

    out: set = set()
    for model, source in renderers:
        for case in model_cases(model):
            body = Body(case.stem, {k: v for k, v in case.request.items() if k != "chat_template_kwargs"})
            features_of(body, [(model, source)], config)
            out |= body.features
    return out


_TAG = re.compile(r"(</?[A-Za-z_|][A-Za-z0-9_|]{0,40}>)")


def redact_text(text: str) -> str:
    """Letters become x (X), digits 0, everything else (spacing, punctuation, markup tags
    such as <think>) stays: placeholder text of the same form and length."""
    return "".join(part if _TAG.fullmatch(part) else
                   re.sub(r"[0-9]", "0", re.sub(r"[A-Z]", "X", re.sub(r"[^\W\d_A-Z]", "x", part)))
                   for part in _TAG.split(text))


class Redactor:
    """A logged body with everything that is not structure the template needs replaced by
    placeholder text of the same form (docs/coverage.md: what `--redact` keeps).

    Kept: the keys of the chat body's own structure (messages, tools, calls, content parts,
    JSON-schema keywords), roles, content part and tool `type`s, JSON-schema types and formats,
    booleans and null, the message order, and any key of free data (metadata, documents,
    chat_template_kwargs, ...) that a selected model's template spells (`keep`: the template
    reads it, so renaming it would change what the template does). Replaced: free text
    (content, text parts, reasoning, document text and titles, descriptions, titles, enum and
    default values, kwargs' string values, argument values) by `redact_text`; numbers by the
    same number of digits; names (tool and function names, parameter and argument names, a
    response format's schema name, message `name`, tool-call ids and `tool_call_id`, and every
    other key of free data: issue 44 found metadata and document keys copied as is) by same-form
    names keyed on the whole log, so a call still names its tool, a result its call, and
    `required` and `$ref` their parameters and definitions; media by the project's own PNG (data
    URLs) or a same-form URL (links, with their query tokens)."""

    def __init__(self, key: bytes, keep: frozenset[str] = frozenset()):
        self.key = key
        self.keep = keep

    def field(self, key: Any) -> Any:
        """A key of free data: as it is when a template spells it, else a same-form name."""
        return key if not isinstance(key, str) or key in self.keep else self.name(key)

    def name(self, value: Any) -> Any:
        """The same name for the same value within one log; letters stay letters of the same
        case, digits digits, everything else as it is."""
        if not isinstance(value, str):
            return self.value(value)
        import hashlib
        import hmac

        stream = hmac.new(self.key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).digest() * (
            1 + len(value) // 32)
        out = []
        for char, byte in zip(value, stream):
            if "a" <= char <= "z":
                char = chr(ord("a") + byte % 26)
            elif "A" <= char <= "Z":
                char = chr(ord("A") + byte % 26)
            elif char.isdigit():
                char = str(byte % 10)
            elif char.isalpha():
                char = "x"
            out.append(char)
        return "".join(out)

    def value(self, value: Any) -> Any:
        """Free data of any type: text, numbers, lists and objects (their keys kept)."""
        if isinstance(value, str):
            return redact_text(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            return int("1" + "0" * (len(str(abs(value))) - 1)) * (-1 if value < 0 else 1)
        if isinstance(value, float):
            return 0.0 if value == 0 else float(f"{1 if value > 0 else -1}e{int(f'{abs(value):e}'.split('e')[1])}")
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.field(k): self.value(v) for k, v in value.items()}
        return value

    def arguments(self, value: Any) -> Any:
        """Tool-call arguments: argument names as parameter names, values as free data."""
        if isinstance(value, dict):
            return {self.name(k): self.value(v) for k, v in value.items()}
        return self.value(value)

    def schema(self, value: Any) -> Any:
        """A JSON schema: keywords and types kept, property names as parameter names, text
        (description, title, enum, default, examples) replaced."""
        if isinstance(value, list):
            return [self.schema(v) for v in value]
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(item, dict):
                out[key] = {self.name(k): self.schema(v) for k, v in item.items()}
            elif key == "required" and isinstance(item, list):
                out[key] = [self.name(v) for v in item]
            elif key in ("description", "title", "enum", "default", "examples", "const", "pattern"):
                out[key] = self.value(item)
            elif key == "$ref" and isinstance(item, str):  # "#/$defs/Name": the names as renamed
                out[key] = "/".join(part if i == 0 or part in ("$defs", "definitions", "properties")
                                    else self.name(part) for i, part in enumerate(item.split("/")))
            elif isinstance(item, str):  # a type, a format, a keyword's value: kept; a name or text: not
                out[key] = item if key in ("type", "format", "$schema", "contentEncoding", "contentMediaType") \
                    else self.name(item) if key == "name" else self.value(item)
            else:
                out[key] = self.schema(item)
        return out

    def part(self, part: Any) -> Any:
        if not isinstance(part, dict):
            return self.value(part)
        out = {}
        for key, item in part.items():
            if key == "type":
                out[key] = item
            elif key in ("image_url", "video_url", "audio_url", "input_audio", "file") and isinstance(item, dict):
                out[key] = {k: self.media(v) if k in ("url", "data", "file_data") else self.value(v)
                            for k, v in item.items()}
            elif key in ("image_url", "video_url") and isinstance(item, str):
                out[key] = self.media(item)
            else:
                out[key] = self.value(item)
        return out

    def media(self, value: Any) -> Any:
        if isinstance(value, str) and value.startswith("data:image/"):
            from generator.config.images import SQUARE, data_url

            return data_url(*SQUARE)
        return self.value(value)

    def tool(self, tool: Any) -> Any:
        if not isinstance(tool, dict):
            return self.value(tool)
        out = {}
        for key, item in tool.items():
            if key == "function" and isinstance(item, dict):
                out[key] = {k: self.name(v) if k == "name" else self.schema(v) if k == "parameters"
                            else v if isinstance(v, bool) else self.value(v) for k, v in item.items()}
            elif key == "type":
                out[key] = item
            elif key == "name":
                out[key] = self.name(item)
            else:
                out[key] = self.schema(item)
        return out

    def call(self, call: Any) -> Any:
        if not isinstance(call, dict):
            return self.value(call)
        out = {}
        for key, item in call.items():
            if key == "function" and isinstance(item, dict):
                function = {}
                for k, v in item.items():
                    if k == "name":
                        function[k] = self.name(v)
                    elif k == "arguments" and isinstance(v, str):
                        try:
                            function[k] = json.dumps(self.arguments(json.loads(v)), ensure_ascii=False)
                        except ValueError:
                            function[k] = redact_text(v)
                    elif k == "arguments":
                        function[k] = self.arguments(v)
                    else:
                        function[k] = self.value(v)
                out[key] = function
            elif key == "type":
                out[key] = item
            elif key == "id":
                out[key] = self.name(item)
            else:
                out[key] = self.value(item)
        return out

    def message(self, message: Any) -> Any:
        if not isinstance(message, dict):
            return self.value(message)
        out = {}
        for key, item in message.items():
            if key == "role":
                out[key] = item
            elif key == "content" and isinstance(item, list):
                out[key] = [self.part(p) for p in item]
            elif key == "tool_calls" and isinstance(item, list):
                out[key] = [self.call(c) for c in item]
            elif key in ("name", "tool_call_id"):
                out[key] = self.name(item)
            else:
                out[key] = self.value(item)
        return out

    def body(self, body: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, item in body.items():
            if key == "messages" and isinstance(item, list):
                out[key] = [self.message(m) for m in item]
            elif key == "tools" and isinstance(item, list):
                out[key] = [self.tool(t) for t in item]
            elif key == "tool_choice" and isinstance(item, dict):
                out[key] = self.tool(item)
            elif key == "chat_template_kwargs" and isinstance(item, dict):
                out[key] = {self.field(k): self.value(v) for k, v in item.items()}
            elif key == "documents" and isinstance(item, list):
                out[key] = [self.value(d) for d in item]
            elif key == "response_format" and isinstance(item, dict):
                out[key] = self.schema(item)
            elif key in ("add_generation_prompt", "continue_final_message", "parallel_tool_calls", "stream"):
                out[key] = item
            elif isinstance(item, str) and key in ("tool_choice", "model", "reasoning_effort"):
                out[key] = item if key != "model" else self.name(item)
            else:
                out[key] = self.value(item)
        return out


def redact(body: dict[str, Any], key: bytes = b"", keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`body` with everything but its structure replaced (Redactor); `key` keys the names, `keep`
    holds the words the templates spell (`template_words`)."""
    return Redactor(key, keep).body(body)


def template_words(*templates: str) -> frozenset[str]:
    """Every identifier the templates spell: a key of free data a template may read."""
    return frozenset(word for template in templates for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", template))


def _log_key(bodies: list[Body]) -> bytes:
    import hashlib

    digest = hashlib.sha256()
    for body in bodies:
        digest.update(canonical.dumps(body.body).encode("utf-8", "surrogatepass"))
    return digest.digest()


@dataclass
class Imported:
    read: int
    kept: list[Body]
    errors: list[str]
    coverage: dict[str, Coverage]  # per model, of the kept set (the whole log's, by construction)


def representatives(bodies: list[Body]) -> list[Body]:
    """The bodies that, in order, add a structural or tool feature (`structure`,
    `tool_features`) no body before them has: what a corpus of thousands holds in few forms,
    rendered once per form."""
    seen: set = set()
    out = []
    for body in bodies:
        features = structure(body.body) | tool_features(body.body)
        if not features <= seen:
            seen |= features
            out.append(body)
    return out


def import_log(path: Path, out: Path, config, models: list, redacting: bool = False,
               presort: bool = False, beyond_matrix: bool = False) -> Imported:
    """The smallest set of the log's bodies reaching everything the whole log reaches; `presort`
    (a corpus) renders only the first body of each form (`representatives`); `beyond_matrix`
    keeps only what reaches something the models' matrix cases do not."""
    from generator import files
    from generator.sources.source import resolve

    bodies, errors = read_log(path)
    read = len(bodies)
    if presort:
        bodies = representatives(bodies)
    renderers = [(model, resolve(model, config)) for model in models]
    for body in bodies:
        features_of(body, renderers, config)
    kept = minimal(bodies, matrix_features(models, renderers, config) if beyond_matrix else None)
    coverage = {}
    for model, source in renderers:
        coverage[model.name] = Coverage(compiled(source.template), {
            f[2] for b in kept for f in b.features if f[0] == "line" and f[1] == model.name})
    if kept:
        out.mkdir(parents=True, exist_ok=True)
    key = _log_key(bodies)  # names are keyed on the whole log: no dictionary recovers them
    keep = template_words(*(source.template for _, source in renderers))
    for body in kept:
        data = redact(body.body, key, keep) if redacting else body.body
        files.atomic_write(out / f"{body.name}.json", request_bytes(data))
    return Imported(read=read + len(errors), kept=kept, errors=errors, coverage=coverage)


def import_corpus(name: str, out: Path, config, models: list) -> Imported:
    """A pinned registry corpus (sources/corpora.py) distilled like a log: its bodies written
    to a scratch folder in the corpus's order, the first of each form rendered, the minimal set
    of those reaching template code or features the models' matrix does not kept in `out`,
    with its lock inside it (generator/locks.py CORPUS, `<out name>.corpus.lock`: pin, licence,
    the kept names). The same pin gives the same bytes."""
    import tempfile

    from generator.sources import corpora

    found = corpora.corpus(name)
    root = corpora.fetch(found)
    with tempfile.TemporaryDirectory(prefix="goldens-corpus-") as tmp:
        for index, (body_name, body) in enumerate(corpora.bfcl_bodies(root)):
            # the index keeps the corpus's order when the folder is read sorted by name
            (Path(tmp) / f"{index:05d}-{body_name}.json").write_text(
                json.dumps(body, ensure_ascii=False, sort_keys=True), encoding="utf-8")
        result = import_log(Path(tmp), out, config, models, presort=True, beyond_matrix=True)
    if result.kept:
        corpora.write_lock(out, name, [body.name for body in result.kept], result.read)
    return result
