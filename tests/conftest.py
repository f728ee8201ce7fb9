"""Shared fixtures: the committed matrix, its resolved sources, and the goldens root."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from generator import models
from generator.sources import Source, resolve

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = ROOT / "goldens"
CONFIG = models.load(ROOT / "models.yaml")


@functools.lru_cache(maxsize=None)
def source_of(model: str) -> Source:
    """A model's resolved tokenizer and template, once per test session."""
    return resolve(CONFIG.models[model], CONFIG)


@pytest.fixture(scope="session")
def config() -> models.Config:
    return CONFIG


@pytest.fixture(scope="session")
def goldens_root() -> Path:
    return GOLDENS
