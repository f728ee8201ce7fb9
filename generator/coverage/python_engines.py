"""The request layers of the engines that run in this process, traced with coverage.py: each
session opens the real engine for the model and replays requests through its `ids`."""

from __future__ import annotations

import contextlib
from pathlib import Path

from generator.coverage import reach
from generator.coverage.engine import InProcess, reachable_files

MISTRAL_SUMMARY = ("the functions a chat request reaches in mistral-common: its request models' "
                   "validators, the request validator and normalizer, and the instruct encoder")
_INSTRUCT = "mistral_common/tokens/tokenizers/instruct.py"
_VALIDATOR = "mistral_common/protocol/instruct/validator.py"
_NORMALIZE = "mistral_common/protocol/instruct/normalize.py"
# The request layer as a reachable set (reach.py): what the engine calls with a body (building
# the ChatCompletionRequest, then MistralTokenizer.encode_chat_completion, as vLLM's mistral mode
# does too), closed over mistral-common's protocol and tokenizer packages, down to the instruct
# encoder; the BPE below it is the tokenizer, not the request layer.
MISTRAL_REACH = reach.Spec(
    packages=("mistral_common/protocol/instruct", "mistral_common/tokens/tokenizers/instruct.py",
              "mistral_common/tokens/tokenizers/mistral.py", "mistral_common/tokens/tokenizers/base.py"),
    seeds=("mistral_common/tokens/tokenizers/mistral.py:MistralTokenizer.encode_chat_completion",),
    models=("mistral_common.protocol.instruct.request:ChatCompletionRequest",),
    stops=(
        # the OpenAI converters run only when a client calls them (goldens builds the request
        # models itself, as vLLM's mistral mode does)
        "mistral_common/protocol/instruct/request.py:ChatCompletionRequest.to_openai",
        "mistral_common/protocol/instruct/request.py:ChatCompletionRequest.from_openai",
    ),
    # the versions Mistral NeMo's tekken (v3) never selects: MistralTokenizer.from_file picks the
    # instruct encoder, validator and normalizer by the tokenizer's version
    absent=tuple(f"{_INSTRUCT}:InstructTokenizerV{v}" for v in (7, 11, 13, 15))
    + tuple(f"{_VALIDATOR}:MistralRequestValidatorV{v}" for v in (5, 11, 13, 15))
    + tuple(f"{_NORMALIZE}:InstructRequestNormalizerV{v}" for v in (7, 13, 15)),
    instances=("mistral_common.tokens.tokenizers.instruct:InstructTokenizerV3",
               "mistral_common.protocol.instruct.validator:MistralRequestValidatorV3",
               "mistral_common.protocol.instruct.normalize:InstructRequestNormalizer"),
)
MINIJINJA_SUMMARY = ("the minijinja package's own Python code a render reaches (its Rust core, where "
                     "rendering happens, is a stripped extension and is not traced); goldens' adaptor is not counted")
# minijinja renders in Rust (`_lowlevel.Environment.render_template`); what of its own Python a
# request reaches is the TemplateError a refusal raises and reads (the adaptor's first_line(error)).
MINIJINJA_REACH = reach.Spec(
    packages=("minijinja/__init__.py", "minijinja/_internal.py"),
    seeds=("minijinja/__init__.py:TemplateError.__init__", "minijinja/__init__.py:TemplateError.__str__"),
)


def _site(package: str) -> Path:
    module = __import__(package)
    return Path(module.__file__).resolve().parent.parent


def _files(package: str, spec: reach.Spec):
    """The package's files holding the reachable set, and their code restricted to it (goldens'
    own adaptor is not the engine's code, so it is not counted)."""
    return reachable_files(_site(package), spec)


def _ids(engine, request):
    return engine.ids(request)


@contextlib.contextmanager
def mistral_session(model, source, config):
    from generator.engines.mistral_common import MistralCommonEngine

    files, code = _files("mistral_common", MISTRAL_REACH)
    yield InProcess(files, lambda: MistralCommonEngine(source), _ids, code).session()


@contextlib.contextmanager
def minijinja_session(model, source, config):
    from generator.engines.minijinja import MinijinjaEngine

    files, code = _files("minijinja", MINIJINJA_REACH)
    yield InProcess(files, lambda: MinijinjaEngine(source, config.date), _ids, code).session()


def mistral_version(config) -> str:
    from importlib.metadata import version

    return version("mistral-common")


def minijinja_version(config) -> str:
    from importlib.metadata import version

    return version("minijinja")
