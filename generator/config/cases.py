"""The matrix: every model x applicable shape x template-kwargs variant, as one Case each.

A Case is the unit everything else speaks in: the reference renders it into a golden, engines
replay it, reports name it. Its id is also its golden's path below goldens/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.config import engine_registry, parse_cases, polyfill
from generator.config.models import Config, ModelSpec
from generator.config.request import carries_media

# What a golden's ids are: the chat template's tokens (media as the one placeholder the template
# writes), or the processor's expanded ids the model's forward pass gets (media parts carry data).
TEMPLATE_VIEW, EXPANDED_VIEW = "template", "expanded"
# The two axes of the served path: request -> prompt ids, and output ids -> the message.
RENDER, PARSE = "render", "parse"


@dataclass(frozen=True)
class Case:
    model: str
    shape: str
    variant: str  # "" for the model's default kwargs
    request: dict[str, Any]
    polyfills: tuple[str, ...] = ()  # a `<shape>_polyfilled` case: what was done to the shape's body
    axis: str = RENDER  # PARSE: a parse case (config/parse_cases.py), goldens/<model>/parse/<stem>.json

    @property
    def id(self) -> str:
        return f"{self.model}/{self.stem}"

    @property
    def view(self) -> str:
        return EXPANDED_VIEW if carries_media(self.request) else TEMPLATE_VIEW

    @property
    def stem(self) -> str:
        stem = f"{self.shape}--{self.variant}" if self.variant else self.shape
        return f"{parse_cases.FOLDER}/{stem}" if self.axis == PARSE else stem


def replays(case: Case, engine: str, model: ModelSpec | None = None) -> bool:
    """Whether `engine` is asked about `case`, as the engine registry declares: a parse case only
    by an engine with a parse path (for `model`, where its rule names the models it parses), a
    render case only by one that renders, and an expanded-view case only by engines that take
    media data (a template renderer has no image to expand)."""
    info = engine_registry.capabilities(engine)
    if case.axis == PARSE:
        return bool(info.parses) and (model is None or engine_registry.parse_reason(engine, model) is None)
    return info.renders and (case.view == TEMPLATE_VIEW or info.media)


def is_parse_case(case_id: str) -> bool:
    """`<model>/parse/<stem>`: a parse case's id."""
    return case_id.split("/")[1:2] == [parse_cases.FOLDER] and case_id.count("/") == 2


def parse_cases_of(model: ModelSpec) -> list[Case]:
    """The model's parse cases: each built-in parse shape its template writes (per variant, as
    the capabilities lock records; none before `goldens regenerate` probed it), then its parse
    request files, once each: a recorded output answers the prompt it was recorded under (the
    file's own chat_template_kwargs over the model's), not every variant's."""
    spec = model.parse
    if spec is None:
        return []
    cases = []
    for variant, kwargs in model.variants.items():
        merged = {**model.kwargs, **kwargs}
        shapes = (spec.written or {}).get(variant, ())
        tools = any(parse_cases.calls(shape) for shape in shapes)  # a template that writes no call is sent none
        for shape in shapes:
            cases.append(Case(model=model.name, shape=shape, variant=variant, axis=PARSE,
                              request=parse_cases.build(shape, merged, tools=tools)))
    for shape, body in spec.requests.items():  # as recorded: with the model's kwargs, under their own
        request = {**body, "chat_template_kwargs": {**model.kwargs, **body["chat_template_kwargs"]}}
        cases.append(Case(model=model.name, shape=shape, variant="", axis=PARSE, request=request))
    return cases


def all_cases(model: ModelSpec) -> list[Case]:
    """Both axes: the render cases, then the parse cases."""
    return model_cases(model) + parse_cases_of(model)


def model_cases(model: ModelSpec) -> list[Case]:
    """Each shape per variant, and after a shape its form inside the template's capabilities
    where the template refuses what the shape needs (generator/config/polyfill.py)."""
    cases = []
    for variant, kwargs in model.variants.items():
        for shape in model.shapes:
            request = model.request(shape, {**model.kwargs, **kwargs})
            cases.append(Case(model=model.name, shape=shape, variant=variant, request=request))
            if model.capabilities and polyfill.wanted(request, model.capabilities):
                fitted, notes = polyfill.apply(request, model.capabilities)
                cases.append(Case(model=model.name, shape=shape + polyfill.SUFFIX, variant=variant,
                                  request=fitted, polyfills=tuple(notes)))
    for name in model.dialect_cases or ():  # the dialect axis: default kwargs only (docs/dialects.md)
        cases.append(Case(model=model.name, shape=name, variant="", request=model.request(name, model.kwargs)))
    return cases


def case_of(config: Config, case_id: str, flag: str = "--case") -> Case:
    """A case id from the command line, validated like every name: `<model>/<stem>` naming one
    case of the matrix (`qwen3/../gemma3/plain` names none), else one error line."""
    from generator.errors import GoldensError

    model, sep, stem = case_id.partition("/")
    shown = case_id if len(case_id) <= 80 else f"{case_id[:80]}... ({len(case_id)} characters)"
    if not sep or model not in config.models:
        raise GoldensError(f"{flag} {shown!r}: not <model>/<case> of a model in {config.path.name} "
                           f"(models: {', '.join(config.models)})")
    cases = {case.stem: case for case in all_cases(config.models[model])}
    if stem not in cases:
        raise GoldensError(f"{flag} {shown!r}: {model} has no such case (e.g. {min(cases)})")
    return cases[stem]


def matrix(config: Config, models: list[str] | tuple[str, ...] = ()) -> list[Case]:
    """All cases of the selected models (every model when none is named), in a stable order."""
    return [case for model in config.select(models) for case in model_cases(model)]
