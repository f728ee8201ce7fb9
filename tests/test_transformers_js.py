"""transformers.js's render (npm @huggingface/jinja + @huggingface/tokenizers in a Node worker)
against the reference: one worker per model for the module, real packages from npm."""

from __future__ import annotations

import pytest
from conftest import CONFIG, golden_of, source_of, tier

from generator.engines import EngineContext, Refused
from generator.engines.transformers_js import engine as transformers_js
from generator.errors import GoldensError


def _engine(model: str) -> transformers_js.TransformersJsEngine:
    return transformers_js.TransformersJsEngine(
        EngineContext(name="transformers-js", model=model, source=source_of(model), date=CONFIG.date))


def test_without_node_the_engine_is_one_line(monkeypatch):
    monkeypatch.setattr(transformers_js.shutil, "which", lambda name: None)
    with pytest.raises(GoldensError, match="node is not installed"):
        _engine("qwen3")


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # Node workers
def engines():
    opened = {}

    def get(model: str):
        if model not in opened:
            opened[model] = _engine(model)
        return opened[model]

    yield get
    for engine in opened.values():
        engine.close()


@pytest.mark.integration
@pytest.mark.parametrize("case", ["qwen3/tools", "gemma3/multi-turn", "deepseek-v3/tool-result", "gpt-oss/plain"])
def test_transformers_js_gives_the_goldens_ids(engines, case):
    golden = golden_of(case)
    ids = engines(case.split("/")[0]).ids(golden.request)
    assert list(ids) == golden.ids
    assert ids.prompt == golden.prompt  # gpt-oss: the date its strftime_now prints is the matrix's


@pytest.mark.integration
def test_a_prefill_is_closed_for_want_of_continue_final_message(engines):
    golden = golden_of("qwen3/prefill")
    ids = engines("qwen3").ids(golden.request)
    assert list(ids[:len(golden.ids)]) == golden.ids
    assert ids.pieces[len(golden.ids)] == "<|im_end|>"
    assert "@huggingface/jinja 0.5.13" in engines("qwen3").version()


@pytest.mark.integration
def test_the_javascript_digits_pretokenizer_splits_only_ascii_digits(engines):
    golden = golden_of("command-r/cjk-emoji")
    ids = engines("command-r").ids(golden.request)
    assert ids.prompt == golden.prompt and len(ids) == len(golden.ids)
    assert (ids[21], ids[22]) == (2245, 129) and (golden.ids[21], golden.ids[22]) == (228, 22957)


@pytest.mark.integration
def test_a_filter_the_javascript_jinja_lacks_is_a_refusal(engines):
    with pytest.raises(Refused, match="reject"):
        engines("llama3").ids(golden_of("llama3/cov-kwarg-builtin-tools-code-interpreter-called").request)
