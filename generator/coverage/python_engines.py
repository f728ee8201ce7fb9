"""The request layers of the engines that run in this process, traced with coverage.py: each
session opens the real engine for the model and replays requests through its `ids`."""

from __future__ import annotations

import contextlib
from pathlib import Path

from generator.coverage.engine import InProcess, python_files

MISTRAL_FILES = (
    "mistral_common/protocol/instruct/chunk.py", "mistral_common/protocol/instruct/messages.py",
    "mistral_common/protocol/instruct/normalize.py", "mistral_common/protocol/instruct/request.py",
    "mistral_common/protocol/instruct/tool_calls.py", "mistral_common/protocol/instruct/validator.py",
    "mistral_common/tokens/tokenizers/instruct.py", "mistral_common/tokens/tokenizers/mistral.py",
)
MISTRAL_SUMMARY = ("mistral-common's request models, validation and normalization, and its instruct "
                   "encoder; goldens' OpenAI-to-mistral-common adaptor")
MINIJINJA_FILES = ("minijinja/__init__.py", "minijinja/_internal.py")
MINIJINJA_SUMMARY = ("goldens' adaptor (request -> minijinja context, TGI's environment) and the "
                     "minijinja package's Python side (its Rust core is not traced)")
REPOSITORY = Path(__file__).resolve().parents[2]  # shows generator/engines/*.py as in the repository


def _site(package: str) -> Path:
    module = __import__(package)
    return Path(module.__file__).resolve().parent.parent


def _files(package: str, relative, adaptor: str) -> dict[str, Path]:
    files = python_files(_site(package), relative)
    files[f"generator/engines/{adaptor}"] = REPOSITORY / "generator" / "engines" / adaptor
    return files


def _ids(engine, request):
    return engine.ids(request)


@contextlib.contextmanager
def mistral_session(model, source, config):
    from generator.engines.mistral_common import MistralCommonEngine

    files = _files("mistral_common", MISTRAL_FILES, "mistral_common.py")
    yield InProcess(files, lambda: MistralCommonEngine(source), _ids).session()


@contextlib.contextmanager
def minijinja_session(model, source, config):
    from generator.engines.minijinja import MinijinjaEngine

    files = _files("minijinja", MINIJINJA_FILES, "minijinja.py")
    yield InProcess(files, lambda: MinijinjaEngine(source, config.date), _ids).session()


def mistral_version(config) -> str:
    from importlib.metadata import version

    return version("mistral-common")


def minijinja_version(config) -> str:
    from importlib.metadata import version

    return version("minijinja")
