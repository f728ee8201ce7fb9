"""Shared fixtures: the committed matrix, its resolved sources, and the goldens root."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from generator.config import models
from generator.sources.source import Source, resolve

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


def one_line_error(result) -> str:
    """A click result that failed the way bad input must: exit 2, one line on stderr, no traceback."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]
