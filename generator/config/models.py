"""models.yaml: which models, where their tokenizer and template come from, what to render.

The file is validated completely before anything runs, and every error names the file and the
key path (`models.yaml: models.qwen3.shapes[2]: unknown shape 'tool'`), because a typo in a
matrix that gates CI must never turn into a silently smaller matrix.
"""

from __future__ import annotations

import copy
import datetime as _dt
import functools
import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from generator import files
from generator.config import dialects, engine_registry, engine_spec
from generator.config.request import check_kwargs, media_kind, parse_request
from generator.config.shapes import SHAPES
from generator.config.shapes import build as build_shape
from generator.errors import GoldensError, first_line

# Names become paths (goldens/<model>/<shape>[--<variant>][.<engine>].json), so they are safe by
# construction: lowercase, short, and a shape never holds a '.' (`tools.vllm` would be the vLLM
# ledger entry of `tools`, `v1.2` a golden whose path names case `v1`).
NAME_LIMIT = 64  # characters in a model, shape or variant name
VARIANT_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
SHAPE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
MODEL_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{0,63}$")
RESERVED = frozenset({"regenerate.index", "causes"})  # what goldens keeps beside the model folders
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class TokenizerSpec:
    """Exactly one of: a pack entry, a Hugging Face repo at a revision, a GGUF file, a dir."""

    kind: str  # "pack" | "hf" | "gguf" | "dir"
    value: str  # pack name, repo id, or path
    revision: str | None = None  # hf only
    # tokenizer_config values this model's own tokenizer states and the GGUF it is built from
    # does not (a GGUF converted from a sibling model): GGUF sources only, e.g. Phi-3.5 on the phi-3 vocab
    config: dict[str, Any] = field(default_factory=dict)
    # a built-in family's tokenizer (`family:` in models.yaml, config/families.py): its name, and
    # for a surrogate the special tokens added to the nearest real tokenizer (`value`)
    family: str | None = None
    surrogate: bool = False
    adds: tuple[str, ...] = ()

    @property
    def from_gguf(self) -> bool:
        """Built from a GGUF: a `gguf:` file or a llama.cpp vocab of the pack."""
        return self.kind == "gguf" or (self.kind == "pack" and self.value.startswith("llama.cpp:"))


@dataclass(frozen=True)
class TemplateSpec:
    """Where the chat template comes from when not from the tokenizer source itself."""

    kind: str  # "tokenizer" | "file" | "pack" | "inline"
    value: str = ""
    name: str | None = None  # a named template in tokenizer_config's list


@dataclass(frozen=True)
class PrefixTail:
    """A declared, by-design prefix break: the last `tokens` of every request may differ in the
    next one (e.g. an empty think block the next request does not render), and why."""

    tokens: int
    reason: str


@dataclass(frozen=True)
class ProcessorSpec:
    """The model's multimodal processor settings (processor_config.json and
    preprocessor_config.json as published with the model), and where they come from: the
    reference's processor is built from them, so expanded-view goldens are pinned like the
    tokenizer."""

    origin: str
    processor_config: dict[str, Any]
    preprocessor_config: dict[str, Any]


@dataclass(frozen=True)
class ParseSpec:
    """The output axis of a model (`parse:` in models.yaml): which built-in parse shapes and
    request files, and the token(s) the model ends its turn with. `written` is what the
    capabilities lock records: per variant, the built-in shapes its template writes (None: not
    probed yet for this selection; `goldens regenerate` probes it)."""

    shapes: tuple[str, ...]
    end: tuple[str, ...] = ()
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    written: dict[str, tuple[str, ...]] | None = None


@dataclass(frozen=True)
class ReviewedDispute:
    """A reviewed disagreement between a model's references (`references.disputes`): for the
    cases its globs name (shape[--variant]), `right` says which reference's outcome engines are
    judged against, and `reason` why."""

    cases: tuple[str, ...]
    right: str  # one of REFERENCES
    reason: str

    def covers(self, case_id: str) -> bool:
        from fnmatch import fnmatchcase

        name = case_id.split("/", 1)[1]
        return any(fnmatchcase(name, glob) for glob in self.cases)


REFERENCES = ("template", "encoder")  # what a reviewed dispute may name right


@dataclass(frozen=True)
class Reviewed:
    """A reviewed invariant finding of one model (analysis/invariants.py reviews findings against
    it): `finding` is a glob on a finding's detail ("tool call * dropped"), `cases` globs on its
    cases' names (shape[--variant]; none: every case)."""

    finding: str
    reason: str
    cases: tuple[str, ...] = ()

    def covers(self, case_id: str, finding: dict[str, str]) -> bool:
        from fnmatch import fnmatchcase

        name = case_id.split("/", 1)[1]
        return (fnmatchcase(finding["detail"], self.finding)
                and (not self.cases or any(fnmatchcase(name, glob) for glob in self.cases)))


@dataclass(frozen=True)
class ModelSpec:
    name: str
    tokenizer: TokenizerSpec
    template: TemplateSpec
    shapes: tuple[str, ...]
    variants: dict[str, dict[str, Any]]  # variant name -> chat_template_kwargs ("" = default)
    engines: tuple[str, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)  # sent with every case (date_string)
    pins: dict[str, str] = field(default_factory=dict)
    # variant name ("" = default) -> the tokens at the end of each request the next one may rewrite
    prefix_tails: dict[str, PrefixTail] = field(default_factory=dict)
    processor: ProcessorSpec | None = None  # expanded-view (media) shapes need one
    # a team's own request bodies (shapes.requests files): shape name (the file stem) -> body
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    # reviewed invariant findings (generator/analysis/invariants.py, docs/invariants.md)
    invariants: tuple[Any, ...] = ()
    # what its template takes, as `goldens regenerate` probed it (generator/config/polyfill.py)
    capabilities: dict[str, str] = field(default_factory=dict)
    # the dialects selected for this model (config/dialects.py; () = none), and the dialect
    # cases (`<shape>_<dialect>`) the lock file keeps for that selection (None: not chosen yet)
    dialects: tuple[str, ...] = ()
    dialect_cases: tuple[str, ...] | None = None
    # vLLM's tool-call parser for the model (`--tool-call-parser`): the managed vLLM runs with it
    # and --enable-auto-tool-choice, as a server that serves tool calls must, so a body's
    # tool_choice (required, a named tool) reaches vLLM's validation instead of a refusal of the
    # server's flags. None: started without, and such a body is refused for want of a parser.
    tool_parser: str | None = None
    # each engine's own parser names for the output side (`parsers: {vllm: {tool: hermes,
    # reasoning: qwen3}, sglang: {...}}`): engine -> {"tool" | "reasoning": name}
    parsers: dict[str, dict[str, str]] = field(default_factory=dict)
    parse: ParseSpec | None = None  # the output axis; None: no parse cases
    # a second reference beside the template (`references: {encoder: NAME}`: config/encoders.py)
    # and the reviewed disputes between the two (docs/references.md)
    encoder: str | None = None
    disputes: tuple[ReviewedDispute, ...] = ()

    @property
    def surrogate(self) -> bool:
        """A built-in family rendered with a surrogate tokenizer: its findings are about templates
        and request layers, never tokenizers (docs/families.md)."""
        return self.tokenizer.surrogate

    def parser(self, engine: str, kind: str) -> str | None:
        """The engine's `kind` ("tool" or "reasoning") parser for this model, if it names one; the
        tool parser of the engine the registry says `tool_parser:` names (vLLM's) is `tool_parser:`
        unless `parsers:` says otherwise."""
        name = self.parsers.get(engine, {}).get(kind)
        if name is None and kind == "tool" and engine_registry.takes_tool_parser(engine):
            return self.tool_parser
        return name

    def request(self, shape: str, chat_template_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The full request for one of this model's shapes, built-in, a dialect case or a
        request file; the matrix's kwargs (model, then variant) go over a file's own
        chat_template_kwargs."""
        if shape not in self.requests:
            if dialects.split(shape) is not None:
                return dialects.request(shape, chat_template_kwargs)
            return build_shape(shape, chat_template_kwargs)
        request = copy.deepcopy(self.requests[shape])
        request["chat_template_kwargs"] = {**request["chat_template_kwargs"], **chat_template_kwargs}
        return request


@dataclass(frozen=True)
class Config:
    path: Path
    date: _dt.date
    models: dict[str, ModelSpec]
    engine_versions: dict[str, str] = field(default_factory=dict)  # engine -> pinned version
    gate: tuple[str, ...] = ()  # classes of known divergence that fail the gate (replay/judging/gate.py)

    def pinned(self, engine: str) -> str | None:
        """The version models.yaml pins for an engine (or for the engine it follows)."""
        return self.engine_versions.get(engine_registry.lookup(engine).pinned_as)

    def select(self, names: tuple[str, ...] | list[str]) -> list[ModelSpec]:
        """The named models in file order (all when none named); an unknown name is an error."""
        for name in names:
            if name not in self.models:
                known = ", ".join(self.models)
                raise GoldensError(f"{self.path.name}: unknown model {name!r} (known: {known})")
        return [m for n, m in self.models.items() if not names or n in names]


def load(path: str | Path) -> Config:
    path = Path(path)
    text = files.read_text(path)
    try:
        data = yaml.load(text, Loader=_LOADER)  # noqa: S506 (a SafeLoader)
    except _KeyError as error:
        raise GoldensError(f"{path.name}: line {error.line}: {error.message}") from None
    except RecursionError:
        raise GoldensError(f"{path.name}: nested too deeply to be a models.yaml") from None
    except yaml.YAMLError as error:
        if "maximum nesting depth" in str(getattr(error, "problem", "")):  # libyaml's own limit
            raise GoldensError(f"{path.name}: nested too deeply to be a models.yaml") from None
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or first_line(error)
        raise GoldensError(f"{path.name}:{where} YAML error: {problem}") from None
    size = expanded_size(data)
    if size > MAX_VALUES:
        raise GoldensError(f"{path.name}: YAML aliases expand it to more than {MAX_VALUES:,} values "
                           f"({size:,}); write the values out, or share less")
    from generator.config import polyfill

    return polyfill.attach(parse(data, path))


MAX_VALUES = 1_000_000  # values models.yaml may hold once its aliases are expanded (the built-in: ~2,000)


def expanded_size(data: Any) -> int:
    """How many values `data` holds with every alias expanded, counted without expanding
    (each shared node is sized once), so an alias bomb is measured in microseconds."""
    sizes: dict[int, int] = {}
    order: list[Any] = []
    stack = [data]
    while stack:  # children before parents, iteratively (no recursion limit)
        node = stack.pop()
        if id(node) in sizes or not isinstance(node, (dict, list)):
            continue
        sizes[id(node)] = -1
        order.append(node)
        stack.extend(node.values() if isinstance(node, dict) else node)
        if isinstance(node, dict):
            stack.extend(node.keys())
    for node in reversed(order):
        children = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) if isinstance(child, (dict, list)) else 1
                                  for child in children)
    return sizes.get(id(data), 1) if isinstance(data, (dict, list)) else 1


def parse(data: Any, path: Path) -> Config:
    where = _Where(path.name, path.parent)
    top = where.mapping(data, "", {"date", "models", "engines", "dialects", "gate"}, required={"models"})
    date = _parse_date(top.get("date", "2026-01-15"), where, "date")
    default_dialects = _parse_dialects(top.get("dialects", "none"), where, "dialects")
    engine_versions = _parse_engines(top.get("engines") or {}, where)
    models_raw = where.mapping(top["models"], "models", None)
    if not models_raw:
        raise GoldensError(f"{path.name}: models: at least one model is required")
    models = {}
    for name, raw in models_raw.items():
        key = f"models.{name}"
        if not isinstance(name, str) or not MODEL_NAME.match(name) or ".." in name:
            shown = _shown(name)
            raise GoldensError(f"{path.name}: models.{shown}: model names are lowercase letters, digits, '-' "
                               f"and '.' (no '..'), at most {NAME_LIMIT} characters")
        if name in RESERVED:
            raise GoldensError(f"{path.name}: models.{name}: {name!r} is the name of a file or folder goldens keeps "
                               "in the goldens folder; choose another model name")
        models[name] = _parse_model(name, raw, where, key, default_dialects)
    lock = dialects.read_lock(path) if any(m.dialects for m in models.values()) else {}
    for name, model in models.items():
        models[name] = with_lock(model, lock.get(name))
    return Config(path=path, date=date, models=models, engine_versions=engine_versions,
                  gate=_parse_gate(top.get("gate") or [], where))


def _parse_gate(raw: Any, where: _Where) -> tuple[str, ...]:
    """`gate: [engine-defect]`: known divergences of these classes fail (replay/judging/gate.py)."""
    classes = ("engine-defect", "policy", "reference", "unclassified")
    if not isinstance(raw, list) or not all(isinstance(c, str) and c in classes for c in raw):
        raise GoldensError(f"{where.file}: gate: a list of classes of known divergence to fail on "
                           f"({', '.join(classes)})")
    return tuple(raw)


def _parse_engines(raw: Any, where: _Where) -> dict[str, str]:
    """`engines: {llama-server: {build: 11434}, vllm: {version: "0.32.0"}}`: the engines the
    registry says have a version of their own; bumping one and running `goldens check` is the
    whole upgrade flow."""
    versions = {}
    pins = engine_registry.pins()
    for name, spec in where.mapping(raw, "engines", set(pins)).items():
        key = pins[name] or engine_registry.pin_key(name, f"{where.file}: engines.{name}")
        spec = where.mapping(spec, f"engines.{name}", {key}, required={key})
        versions[name] = engine_spec.normalize(name, spec[key], f"{where.file}: engines.{name}.{key}")
    return versions


MODEL_KEYS = {"family", "tokenizer", "template", "shapes", "variants", "engines", "kwargs", "pins", "prefix_tails",
              "processor", "invariants", "dialects", "tool_parser", "parsers", "parse", "references"}
# an engine's tool-call and reasoning parsers; Transformers' `response` template (the fallback
# `transformers serve` picks by model_type: qwen3, gemma4, ...)
PARSER_KINDS = ("tool", "reasoning", "response")
TOOL_PARSER = re.compile(r"^[a-z0-9][a-z0-9_]{0,63}$")
PARSER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")  # SGLang spells some with '-' (gpt-oss)


def _parse_dialects(raw: Any, where: _Where, key: str) -> tuple[str, ...]:
    """`dialects: all | none | [names]` (config/dialects.py: `all` is the hand-written ones; a
    list may name `derived`, every generated one, or `all` and `derived` together)."""
    if raw == "all":
        return dialects.WRITTEN
    if raw == "none" or raw is None:
        return ()
    names = where.string_list(raw, key)
    for i, name in enumerate(names):
        if name not in ("all", "derived") and name not in dialects.DIALECTS:
            raise GoldensError(f"{where.file}: {key}[{i}]: unknown dialect {name!r} "
                               f"(known: {', '.join(dialects.WRITTEN)}, derived; or all, none)")
    return dialects.selection([n for name in names for n in (dialects.WRITTEN if name == "all" else (name,))])


def with_lock(model: ModelSpec, entry: dict[str, list[str]] | None) -> ModelSpec:
    """The model with the dialect cases its lock entry keeps, when that entry was chosen from
    this very selection and names only cases the model's shapes make; else not chosen (None)."""
    import dataclasses

    if not model.dialects:
        return dataclasses.replace(model, dialect_cases=())
    if entry is None or tuple(entry["dialects"]) != model.dialects:
        return dataclasses.replace(model, dialect_cases=None)
    possible = set(dialects.candidates(model.shapes, model.dialects))
    if not all(isinstance(c, str) and c in possible for c in entry["cases"]):
        return dataclasses.replace(model, dialect_cases=None)
    return dataclasses.replace(model, dialect_cases=tuple(entry["cases"]))


def _parse_model(name: str, raw: Any, where: _Where, key: str, default_dialects: tuple[str, ...] = ()) -> ModelSpec:
    raw = where.mapping(raw, key, MODEL_KEYS)
    if "family" in raw:
        tokenizer, template = _parse_family(raw, where, key)
    elif "tokenizer" not in raw:
        raise GoldensError(f"{where.file}: {key}.tokenizer: missing required key (or `family:`, a built-in "
                           "family from `goldens models`)")
    else:
        tokenizer = _parse_tokenizer(raw["tokenizer"], where, f"{key}.tokenizer")
        template = _parse_template(raw.get("template"), where, f"{key}.template")
    processor = _parse_processor(raw.get("processor"), where, f"{key}.processor")
    shapes, requests = _parse_shapes(raw.get("shapes", "all"), where, f"{key}.shapes")
    shapes = _media_shapes(shapes, requests, raw.get("shapes", "all"), processor, where, f"{key}.shapes")
    variants: dict[str, dict[str, Any]] = {"": {}}
    for vname, kwargs in where.mapping(raw.get("variants") or {}, f"{key}.variants", None).items():
        vkey = f"{key}.variants.{vname}"
        if not isinstance(vname, str) or not VARIANT_NAME.match(vname):
            raise GoldensError(f"{where.file}: {key}.variants.{_shown(vname)}: variant names are lowercase "
                               f"letters, digits and '-', at most {NAME_LIMIT} characters")
        variants[vname] = dict(where.mapping(kwargs, vkey, None))
        check_kwargs(variants[vname], f"{where.file}: {vkey}")
    engines = where.string_list(raw.get("engines", [engine_registry.REFERENCE]), f"{key}.engines")
    for i, engine in enumerate(engines):
        engine_registry.lookup(engine, f"{where.file}: {key}.engines[{i}]")
    kwargs = dict(where.mapping(raw.get("kwargs") or {}, f"{key}.kwargs", None))
    check_kwargs(kwargs, f"{where.file}: {key}.kwargs")
    pins = where.mapping(raw.get("pins") or {}, f"{key}.pins", {"tokenizer_sha256", "template_sha256"})
    for pin_key, value in pins.items():
        if not isinstance(value, str) or not SHA256.match(value):
            raise GoldensError(f"{where.file}: {key}.pins.{pin_key}: expected 64 lowercase hex digits")
    tails = _parse_tails(raw.get("prefix_tails") or {}, variants, where, f"{key}.prefix_tails")
    tool_parser = raw.get("tool_parser")
    if tool_parser is not None and not (isinstance(tool_parser, str) and TOOL_PARSER.match(tool_parser)):
        raise GoldensError(f"{where.file}: {key}.tool_parser: a vLLM tool-call parser name "
                           f"(hermes, llama3_json, mistral, ...): lowercase letters, digits and '_'")
    return ModelSpec(
        name=name, tokenizer=tokenizer, template=template, shapes=shapes, variants=variants,
        engines=tuple(engines), kwargs=kwargs, pins=dict(pins),
        prefix_tails=tails, processor=processor, requests=requests,
        invariants=_parse_invariants(raw.get("invariants") or [], where, f"{key}.invariants"),
        dialects=_parse_dialects(raw["dialects"], where, f"{key}.dialects") if "dialects" in raw else default_dialects,
        tool_parser=tool_parser,
        parsers=_parse_parsers(raw.get("parsers") or {}, where, f"{key}.parsers"),
        parse=_parse_parse(raw.get("parse"), where, f"{key}.parse"),
        **_parse_references(raw.get("references"), where, f"{key}.references"),
    )


def _parse_references(raw: Any, where: _Where, key: str) -> dict[str, Any]:
    """`references: {encoder: NAME, disputes: [{cases: [globs], right: template | encoder,
    reason: "..."}]}`: the model's encoder reference and the reviewed disputes between it and
    the template (docs/references.md)."""
    from generator.config import encoders

    if raw is None:
        return {}
    raw = where.mapping(raw, key, {"encoder", "disputes"}, required={"encoder"})
    if not isinstance(raw["encoder"], str):
        raise GoldensError(f"{where.file}: {key}.encoder: an encoder's name (known: {', '.join(sorted(encoders.ENCODERS))})")
    encoders.lookup(raw["encoder"], f"{where.file}: {key}.encoder")
    items = raw.get("disputes") or []
    if not isinstance(items, list):
        raise GoldensError(f"{where.file}: {key}.disputes: expected a list of {{cases, right, reason}}")
    disputes = []
    for i, item in enumerate(items):
        item = where.mapping(item, f"{key}.disputes[{i}]", {"cases", "right", "reason"},
                             required={"cases", "right", "reason"})
        cases = where.string_list(item["cases"], f"{key}.disputes[{i}].cases")
        if not cases:
            raise GoldensError(f"{where.file}: {key}.disputes[{i}].cases: name the cases (globs on shape[--variant])")
        if item["right"] not in REFERENCES:
            raise GoldensError(f"{where.file}: {key}.disputes[{i}].right: {_shown(item['right'])} is not one of "
                               f"{', '.join(REFERENCES)}")
        if not isinstance(item["reason"], str) or not item["reason"].strip():
            raise GoldensError(f"{where.file}: {key}.disputes[{i}].reason: say why that reference is right")
        disputes.append(ReviewedDispute(tuple(cases), item["right"], " ".join(item["reason"].split())))
    return {"encoder": raw["encoder"], "disputes": tuple(disputes)}


def _parse_parse(raw: Any, where: _Where, key: str) -> ParseSpec | None:
    """`parse: {shapes: all | [names] | {all_except|only: [names], requests: [globs]}, end: TOKEN
    | [TOKENS]}`: the model's parse cases (config/parse_cases.py) and its end-of-turn token(s)."""
    from generator.config import parse_cases

    if raw is None:
        return None
    raw = where.mapping(raw, key, {"shapes", "end"})
    shapes_raw = raw.get("shapes", "all")
    requests: dict[str, dict] = {}
    if shapes_raw == "all":
        shapes = tuple(parse_cases.SHAPES)
    elif isinstance(shapes_raw, dict):
        shapes_raw = where.mapping(shapes_raw, f"{key}.shapes", {"all_except", "only", "requests"})
        if "all_except" in shapes_raw and "only" in shapes_raw:
            raise GoldensError(f"{where.file}: {key}.shapes: give at most one of all_except, only")
        names = where.string_list(shapes_raw.get("only", shapes_raw.get("all_except", [])), f"{key}.shapes")
        _check_parse_shapes(names, where, f"{key}.shapes")
        shapes = tuple(names) if "only" in shapes_raw else tuple(s for s in parse_cases.SHAPES if s not in names)
        requests = _request_files(shapes_raw.get("requests", []), where, f"{key}.shapes.requests",
                                  validate=parse_cases.validate)
    else:
        names = where.string_list(shapes_raw, f"{key}.shapes")
        _check_parse_shapes(names, where, f"{key}.shapes")
        shapes = tuple(names)
    end = raw.get("end", [])
    end = [end] if isinstance(end, str) else end
    end = where.string_list(end, f"{key}.end")
    if any(not token for token in end):
        raise GoldensError(f"{where.file}: {key}.end: a token's text, e.g. <|im_end|>")
    return ParseSpec(shapes=shapes, end=tuple(end), requests=requests)


def _check_parse_shapes(names: list[str], where: _Where, key: str) -> None:
    from generator.config import parse_cases

    for i, name in enumerate(names):
        if name not in parse_cases.SHAPES:
            raise GoldensError(f"{where.file}: {key}[{i}]: unknown parse shape {name!r} "
                               f"(known: {', '.join(parse_cases.SHAPES)})")


def _parse_parsers(raw: Any, where: _Where, key: str) -> dict[str, dict[str, str]]:
    """`parsers: {<engine>: {tool: NAME, reasoning: NAME}}`: each engine's own parser names."""
    out = {}
    for engine, names in where.mapping(raw, key, None).items():
        engine_registry.lookup(str(engine), f"{where.file}: {key}")
        names = where.mapping(names, f"{key}.{engine}", set(PARSER_KINDS))
        for kind, name in names.items():
            if not (isinstance(name, str) and PARSER_NAME.match(name)):
                raise GoldensError(f"{where.file}: {key}.{engine}.{kind}: a parser name: lowercase "
                                   "letters, digits, '_' and '-'")
        out[str(engine)] = dict(names)
    return out


def _parse_invariants(raw: Any, where: _Where, key: str) -> tuple[Any, ...]:
    """`invariants: [{finding: "tool call * dropped", cases: [globs], reason: "..."}]`: reviewed
    invariant findings (generator/analysis/invariants.py)."""
    if not isinstance(raw, list):
        raise GoldensError(f"{where.file}: {key}: expected a list of {{finding, reason[, cases]}}")
    out = []
    for i, item in enumerate(raw):
        item = where.mapping(item, f"{key}[{i}]", {"finding", "reason", "cases"}, required={"finding", "reason"})
        for name in ("finding", "reason"):
            if not isinstance(item[name], str) or not item[name].strip():
                raise GoldensError(f"{where.file}: {key}[{i}].{name}: expected a non-empty string")
        cases = where.string_list(item.get("cases", []), f"{key}[{i}].cases")
        out.append(Reviewed(finding=item["finding"].strip(), reason=" ".join(item["reason"].split()),
                            cases=tuple(cases)))
    return tuple(out)


def _parse_tails(raw: Any, variants: dict[str, dict], where: _Where, key: str) -> dict[str, PrefixTail]:
    """`prefix_tails: {<variant> | default: {tokens: N, reason: "..."}}`, keyed by variant."""
    tails = {}
    for vname, spec in where.mapping(raw, key, None).items():
        vkey = f"{key}.{vname}"
        variant = "" if vname == "default" else vname
        if vname == "" or variant not in variants:
            known = ", ".join(v or "default" for v in variants)
            raise GoldensError(f"{where.file}: {vkey}: unknown variant (known: {known})")
        spec = where.mapping(spec, vkey, {"tokens", "reason"}, required={"tokens", "reason"})
        tokens, reason = spec["tokens"], spec["reason"]
        if type(tokens) is not int or tokens < 1:
            raise GoldensError(f"{where.file}: {vkey}.tokens: expected a positive integer")
        if not isinstance(reason, str) or not reason.strip():
            raise GoldensError(f"{where.file}: {vkey}.reason: expected a non-empty string")
        tails[variant] = PrefixTail(tokens=tokens, reason=" ".join(reason.split()))
    return tails


def _parse_processor(raw: Any, where: _Where, key: str) -> ProcessorSpec | None:
    """`processor: {origin: "...", processor_config: {...}, preprocessor_config: {...}}`."""
    if raw is None:
        return None
    keys = {"origin", "processor_config", "preprocessor_config"}
    raw = where.mapping(raw, key, keys, required=keys)
    if not isinstance(raw["origin"], str) or not raw["origin"].strip():
        raise GoldensError(f"{where.file}: {key}.origin: say where these settings come from")
    configs = {name: dict(where.mapping(raw[name], f"{key}.{name}", None))
               for name in ("processor_config", "preprocessor_config")}
    for name in ("processor_config", "preprocessor_config"):
        if not isinstance(configs[name].get("processor_class", "Processor"), str):
            raise GoldensError(f"{where.file}: {key}.{name}.processor_class: expected a class name")
    return ProcessorSpec(origin=" ".join(raw["origin"].split()), **configs)


@functools.cache
def _built_in_media(shape: str) -> str | None:
    """What media a built-in shape carries: the same for every model, so built once a process."""
    return media_kind(build_shape(shape, {}))


def _media_shapes(shapes: tuple[str, ...], requests: dict[str, dict[str, Any]], raw: Any,
                  processor: ProcessorSpec | None, where: _Where, key: str) -> tuple[str, ...]:
    """Shapes that carry media data are rendered by the model's processor: without one they are
    left out of `all` / `all_except`, and naming one explicitly is an error."""
    if processor is not None:
        return shapes
    media = [s for s in shapes if (media_kind(requests[s]) if s in requests else _built_in_media(s))]
    if media and (isinstance(raw, list) or (isinstance(raw, dict) and "only" in raw)):
        kind = media_kind(requests[media[0]]) if media[0] in requests else _built_in_media(media[0])
        raise GoldensError(f"{where.file}: {key}: shape {media[0]!r} carries {kind} and needs "
                           f"`processor:` settings for this model")
    return tuple(s for s in shapes if s not in media)


def _parse_tokenizer(raw: Any, where: _Where, key: str) -> TokenizerSpec:
    raw = where.mapping(raw, key, {"pack", "hf", "gguf", "dir", "revision", "tokenizer_config"})
    kinds = [k for k in ("pack", "hf", "gguf", "dir") if k in raw]
    if len(kinds) != 1:
        raise GoldensError(f"{where.file}: {key}: give exactly one of pack, hf, gguf, dir")
    kind = kinds[0]
    value = raw[kind]
    if not isinstance(value, str) or not value:
        raise GoldensError(f"{where.file}: {key}.{kind}: expected a non-empty string")
    revision = raw.get("revision")
    if kind == "hf":
        if not isinstance(revision, str) or not revision:
            raise GoldensError(f"{where.file}: {key}.revision: a Hugging Face source needs a pinned revision")
    elif revision is not None:
        raise GoldensError(f"{where.file}: {key}.revision: only a hf source takes a revision")
    spec = TokenizerSpec(kind=kind, value=value, revision=revision)
    if "tokenizer_config" in raw:
        config = where.mapping(raw["tokenizer_config"], f"{key}.tokenizer_config", None)
        if not spec.from_gguf:
            raise GoldensError(f"{where.file}: {key}.tokenizer_config: only a tokenizer built from a GGUF "
                               "(gguf: or pack llama.cpp:) takes tokenizer_config; a directory states its own")
        for name, item in config.items():
            if not isinstance(name, str) or not (item is None or isinstance(item, (str, bool, int, float))):
                raise GoldensError(f"{where.file}: {key}.tokenizer_config.{name}: expected a name and a "
                                   "scalar value (true, false, a number, a string or null)")
        spec = TokenizerSpec(kind=kind, value=value, revision=revision, config=dict(config))
    return spec


def _parse_family(raw: dict, where: _Where, key: str) -> tuple[TokenizerSpec, TemplateSpec]:
    """`family: kimi-k3`: a built-in family (config/families.py) supplies the template (its file
    of llama.cpp's models/templates/) and the tokenizer (real, or a surrogate: the nearest real
    one plus the template's special tokens, sources/surrogate.py)."""
    import difflib

    from generator.config import families

    for given in ("tokenizer", "template"):
        if given in raw:
            raise GoldensError(f"{where.file}: {key}.{given}: a family supplies its tokenizer and template; "
                               f"give `family:` or `{given}:`, not both")
    name = raw["family"]
    if not isinstance(name, str) or not name:
        raise GoldensError(f"{where.file}: {key}.family: expected a built-in family's name (`goldens models`)")
    catalogue = {family.name: family for family in families.builtin()}
    family = catalogue.get(name)
    if family is None:
        close = difflib.get_close_matches(name, list(catalogue), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise GoldensError(f"{where.file}: {key}.family: unknown family {_shown(name)!r} "
                           f"({len(catalogue)} built-in: `goldens models`){hint}")
    tok = family.tokenizer
    surrogate = tok.kind == "surrogate"
    tokenizer = TokenizerSpec(kind="pack", value=tok.source, config=dict(tok.tokenizer_config or {}),
                              family=family.name, surrogate=surrogate, adds=tok.adds if surrogate else ())
    return tokenizer, TemplateSpec(kind="pack", value=family.template_pack)


def _parse_template(raw: Any, where: _Where, key: str) -> TemplateSpec:
    if raw is None:
        return TemplateSpec(kind="tokenizer")
    raw = where.mapping(raw, key, {"file", "pack", "inline", "name"})
    kinds = [k for k in ("file", "pack", "inline") if k in raw]
    if len(kinds) > 1:
        raise GoldensError(f"{where.file}: {key}: give at most one of file, pack, inline")
    name = raw.get("name")
    if name is not None and (not isinstance(name, str) or kinds):
        raise GoldensError(f"{where.file}: {key}.name: a template name selects from the tokenizer's own list")
    if not kinds:
        return TemplateSpec(kind="tokenizer", name=name)
    value = raw[kinds[0]]
    if not isinstance(value, str) or not value:
        raise GoldensError(f"{where.file}: {key}.{kinds[0]}: expected a non-empty string")
    return TemplateSpec(kind=kinds[0], value=value)


def _parse_shapes(raw: Any, where: _Where, key: str) -> tuple[tuple[str, ...], dict[str, dict]]:
    """`all`, a list of built-in names, or a mapping: `all_except` or `only` (built-ins; neither
    means all) and `requests` (globs of request files, relative to models.yaml)."""
    if raw == "all":
        return tuple(SHAPES), {}
    if not isinstance(raw, dict):
        names = where.string_list(raw, key)
        _check_shapes(names, where, key)
        if not names:
            raise GoldensError(f"{where.file}: {key}: no shape is left (name built-in shapes or request files)")
        return tuple(names), {}
    raw = where.mapping(raw, key, {"all_except", "only", "requests"})
    if "all_except" in raw and "only" in raw:
        raise GoldensError(f"{where.file}: {key}: give at most one of all_except, only")
    if "only" in raw:
        names = where.string_list(raw["only"], f"{key}.only")
        _check_shapes(names, where, f"{key}.only")
        builtin = tuple(names)
    else:
        skip = where.string_list(raw.get("all_except", []), f"{key}.all_except")
        _check_shapes(skip, where, f"{key}.all_except")
        builtin = tuple(s for s in SHAPES if s not in skip)
    if "all_except" not in raw and "only" not in raw and "requests" not in raw:
        raise GoldensError(f"{where.file}: {key}: give all_except, only or requests")
    requests = _request_files(raw.get("requests", []), where, f"{key}.requests")
    if not builtin and not requests:  # no case at all: regenerate would write nothing, exit 0, and
        # check judge nothing (issue 44)
        raise GoldensError(f"{where.file}: {key}: no shape is left (name built-in shapes or request files)")
    return builtin + tuple(requests), requests


def _request_files(raw: Any, where: _Where, key: str, validate: Any = None) -> dict[str, dict]:
    """Each file matched by the globs: an OpenAI-style chat body, checked like `goldens render`
    checks one (a parse request by config/parse_cases.py's `validate`); its stem names the shape."""
    from generator.config import parse_cases

    taken = SHAPES if validate is None else parse_cases.SHAPES
    requests: dict[str, dict] = {}
    for i, pattern in enumerate(where.string_list(raw, key)):
        found = sorted(Path(p) for p in glob.glob(os.path.join(where.base, pattern)))
        for path in found:  # a link to nowhere, or a loop, is said as such, not skipped silently
            if path.is_symlink() and not path.exists():
                try:
                    path.resolve(strict=True)
                    problem = "a symlink to nothing"
                except RuntimeError:
                    problem = "a symlink loop"
                except OSError as error:
                    problem = "a symlink loop" if error.errno == 40 else "a symlink to nothing"
                raise GoldensError(f"{where.file}: {key}[{i}]: {os.path.relpath(path, where.base)}: is {problem}")
        matches = [path for path in found if path.is_file()]
        if not matches:
            raise GoldensError(f"{where.file}: {key}[{i}]: {pattern!r} matches no file")
        for path in matches:
            shape = path.stem if path.suffix == ".json" else path.name
            shown = os.path.relpath(path, where.base) if not Path(pattern).is_absolute() else str(path)
            try:  # the rule for every file models.yaml names: inside its folder, after every link
                files.config_path(where.base, path)
            except GoldensError as error:
                raise GoldensError(f"{where.file}: {key}[{i}]: {_shown(shown, 80)}: {error}") from None
            if not SHAPE_NAME.match(shape) or "--" in shape:
                raise GoldensError(
                    f"{where.file}: {key}[{i}]: {_shown(shown)}: a request file's stem names its shape: "
                    f"lowercase letters, digits, '_' and single '-', at most {NAME_LIMIT} characters (no '.': "
                    "<shape>.<engine> is a ledger entry's name)"
                )
            if dialects.split(shape) is not None:
                raise GoldensError(f"{where.file}: {key}[{i}]: {shown}: {shape!r} names a dialect case "
                                   "(<shape>_<dialect>); rename the file")
            if shape in taken or shape in requests:
                raise GoldensError(f"{where.file}: {key}[{i}]: {shown}: shape {shape!r} is already defined")
            if shape.endswith("_polyfilled"):
                raise GoldensError(f"{where.file}: {key}[{i}]: {shown}: `<shape>_polyfilled` names the form "
                                   "goldens makes of a shape the template refuses; rename the file")
            text = files.read_text(path, f"{where.file}: {key}[{i}]: {shown}")
            if validate is None:
                requests[shape] = parse_request(text, f"{where.file}: {key}[{i}]: {shown}")
            else:
                from generator.json_reader import load_json

                shown_where = f"{where.file}: {key}[{i}]: {shown}"
                requests[shape] = validate(load_json(text, shown_where), shown_where)
    return requests


def _shown(name: Any, limit: int = 40) -> str:
    """A name as an error shows it: repr, cut to `limit` characters (a 10,000-character name is
    not echoed whole)."""
    text = repr(name) if not isinstance(name, str) else name
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _check_shapes(names: list[str], where: _Where, key: str) -> None:
    for i, name in enumerate(names):
        if name not in SHAPES:
            raise GoldensError(
                f"{where.file}: {key}[{i}]: unknown shape {name!r} (known: {', '.join(SHAPES)})"
            )


def _parse_date(raw: Any, where: _Where, key: str) -> _dt.date:
    if isinstance(raw, _dt.date):
        return raw
    try:
        return _dt.date.fromisoformat(str(raw))
    except ValueError:
        raise GoldensError(f"{where.file}: {key}: expected a date like 2026-01-15") from None


class _KeyError(Exception):
    def __init__(self, line: int, message: str):
        self.line, self.message = line, message


class _Strict:
    """safe_load, minus two YAML surprises that would silently change the matrix: a key given
    twice (YAML keeps the last) and a plain key YAML reads as a boolean (`off:`, `no:`, `yes:`)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, tuple[int, int]] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            line = key_node.start_mark.line + 1
            at = (line, key_node.start_mark.index)  # two keys on one line (a flow mapping) differ here
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, bool):
                raise _KeyError(line, f"key {key_node.value!r} is read by YAML as the boolean {key}; "
                                      f"quote it (\"{key_node.value}\") to use it as a name")
            try:
                first = seen.setdefault(key, at)
            except TypeError:
                continue  # an unhashable key: the constructor reports it
            if first != at:
                raise _KeyError(line, f"duplicate key {key!r} (first given at line {first[0]}); "
                                      "YAML would keep only the last")
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_timestamp(self, node):
        """`date: 2026-02-30` looks like a date to YAML, which then fails building it."""
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as error:
            raise _KeyError(node.start_mark.line + 1, f"{node.value!r} is not a date ({error})") from None


class _StrictLoader(_Strict, yaml.SafeLoader):
    """The pure-Python parser: what runs where PyYAML was built without libyaml."""


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _Strict.construct_yaml_timestamp)
_LOADER = _StrictLoader
if getattr(yaml, "__with_libyaml__", False):
    class _StrictCLoader(_Strict, yaml.CSafeLoader):
        """libyaml's parser (about five times faster on models.yaml, read on every command), with
        the same constructor: the same values and the same refusals."""

    _StrictCLoader.add_constructor("tag:yaml.org,2002:timestamp", _Strict.construct_yaml_timestamp)
    _LOADER = _StrictCLoader


class _Where:
    """Type checks that name the file and key path in their one-line errors."""

    def __init__(self, file: str, base: Path = Path(".")):
        self.file = file
        self.base = base  # the directory relative paths in the file are resolved against

    def mapping(self, value: Any, key: str, allowed: set[str] | None, required: set[str] = frozenset()):
        label = key or "top level"
        if not isinstance(value, dict):
            raise GoldensError(f"{self.file}: {label}: expected a mapping, got {_kind(value)}")
        if allowed is not None:
            for name in value:
                if name not in allowed:
                    dotted = f"{key}.{name}" if key else str(name)
                    raise GoldensError(
                        f"{self.file}: {dotted}: unknown key (allowed: {', '.join(sorted(allowed))})"
                    )
        for name in sorted(required):
            if name not in value:
                dotted = f"{key}.{name}" if key else name
                raise GoldensError(f"{self.file}: {dotted}: missing required key")
        return value

    def string_list(self, value: Any, key: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise GoldensError(f"{self.file}: {key}: expected a list of names")
        return value


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__
