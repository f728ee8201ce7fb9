"""mistral-common's request layer, traced with coverage.py in this process: a session opens the
real engine for the model and replays requests through its `ids` (measure/engine.py's InProcess).
The registry names LAYER (Entry.coverage); coverage/engine_layers.py runs it."""

from __future__ import annotations

import contextlib

from generator.measure import reach
from generator.measure.engine import InProcess, Layer, installed_reachable

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


@contextlib.contextmanager
def session(model, source, config):
    files, code = installed_reachable("mistral_common", MISTRAL_REACH)
    yield InProcess(files, lambda: _cold(source), lambda engine, request: engine.ids(request), code).session()


def _cold(source):
    """The engine made as a fresh process makes it: its tekken loaded under coverage, not taken
    from load_tekken's cache (a warm start would leave the loading code unrun, so a measure would
    depend on what ran before it in the process)."""
    from generator.engines.mistral_common.engine import MistralCommonEngine, load_tekken

    load_tekken.cache_clear()
    return MistralCommonEngine(source)


def version(config) -> str:
    from importlib.metadata import version

    return version("mistral-common")


LAYER = Layer(MISTRAL_SUMMARY, session, version)
