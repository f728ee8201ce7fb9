"""The matrix: every model x applicable shape x template-kwargs variant, as one Case each.

A Case is the unit everything else speaks in: the reference renders it into a golden, engines
replay it, reports name it. Its id is also its golden's path below goldens/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.config import engine_registry, polyfill
from generator.config.models import Config, ModelSpec
from generator.config.request import carries_media

# What a golden's ids are: the chat template's tokens (media as the one placeholder the template
# writes), or the processor's expanded ids the model's forward pass gets (media parts carry data).
TEMPLATE_VIEW, EXPANDED_VIEW = "template", "expanded"


@dataclass(frozen=True)
class Case:
    model: str
    shape: str
    variant: str  # "" for the model's default kwargs
    request: dict[str, Any]
    polyfills: tuple[str, ...] = ()  # a `<shape>_polyfilled` case: what was done to the shape's body

    @property
    def id(self) -> str:
        return f"{self.model}/{self.stem}"

    @property
    def view(self) -> str:
        return EXPANDED_VIEW if carries_media(self.request) else TEMPLATE_VIEW

    @property
    def stem(self) -> str:
        return f"{self.shape}--{self.variant}" if self.variant else self.shape


def replays(case: Case, engine: str) -> bool:
    """Whether `engine` is asked about `case`: an expanded-view case only by engines that take
    media data, as the engine registry declares (a template renderer has no image to expand)."""
    return case.view == TEMPLATE_VIEW or engine_registry.capabilities(engine).media


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
    cases = {case.stem: case for case in model_cases(config.models[model])}
    if stem not in cases:
        raise GoldensError(f"{flag} {shown!r}: {model} has no such case (e.g. {min(cases)})")
    return cases[stem]


def matrix(config: Config, models: list[str] | tuple[str, ...] = ()) -> list[Case]:
    """All cases of the selected models (every model when none is named), in a stable order."""
    return [case for model in config.select(models) for case in model_cases(model)]
