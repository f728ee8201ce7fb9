"""The matrix: every model x applicable shape x template-kwargs variant, as one Case each.

A Case is the unit everything else speaks in: the reference renders it into a golden, engines
replay it, reports name it. Its id is also its golden's path below goldens/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generator.config.models import Config, ModelSpec


@dataclass(frozen=True)
class Case:
    model: str
    shape: str
    variant: str  # "" for the model's default kwargs
    request: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.model}/{self.stem}"

    @property
    def stem(self) -> str:
        return f"{self.shape}--{self.variant}" if self.variant else self.shape


def model_cases(model: ModelSpec) -> list[Case]:
    cases = []
    for variant, kwargs in model.variants.items():
        for shape in model.shapes:
            request = model.request(shape, {**model.kwargs, **kwargs})
            cases.append(Case(model=model.name, shape=shape, variant=variant, request=request))
    return cases


def matrix(config: Config, models: list[str] | tuple[str, ...] = ()) -> list[Case]:
    """All cases of the selected models (every model when none is named), in a stable order."""
    return [case for model in config.select(models) for case in model_cases(model)]
