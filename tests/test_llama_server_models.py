"""The built-in models llama-server gained (gpt-oss, gemma4, deepseek-v3, command-r, mistral-nemo),
each on a tiny GGUF around its real tokenizer and template: what their templates and llama.cpp's
dedicated handlers need from a managed server (its clock at the matrix's date, the serving
path's output parser, a template llama.cpp's Jinja cannot render)."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

import pytest
from conftest import CONFIG, engine_of, golden_of

from generator.engines import Refused
from generator.errors import GoldensError
from generator.engines.llama_server import llama_cpp


def test_the_clock_starts_at_the_matrix_date_through_libfaketime(monkeypatch):
    present = next(path for path in llama_cpp.FAKETIME_LIBRARIES if Path(path).exists())
    env = llama_cpp.clock_at(_dt.date(2026, 1, 15))
    assert env == {"LD_PRELOAD": present, "FAKETIME": "@2026-01-15 12:00:00", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    monkeypatch.setattr(llama_cpp, "FAKETIME_LIBRARIES", ("/nonexistent/libfaketime.so.1",))
    with pytest.raises(GoldensError, match="install libfaketime"):
        llama_cpp.clock_at(_dt.date(2026, 1, 15))




@pytest.mark.integration
def test_gpt_oss_renders_the_matrix_date_and_its_serving_path_is_confirmed(pool):
    engine = engine_of(pool, "llama-server", "gpt-oss")
    golden = golden_of("gpt-oss/plain")
    ids = engine.ids(golden.request)
    assert f"Current date: {CONFIG.date.isoformat()}" in ids.prompt
    assert list(ids) == golden.ids
    # a random token the gpt-oss output parser refuses is generated again as <|return|>
    served = engine.serve(golden.request, list(ids))
    assert served.refused is None
    assert set(served.counts.values()) == {len(golden.ids)}


@pytest.mark.integration
def test_a_template_llama_cpp_cannot_render_is_a_refusal(pool):
    engine = engine_of(pool, "llama-server", "gemma4")
    with pytest.raises(Refused, match="map: filter-mapping not implemented"):
        engine.ids(golden_of("gemma4/cov-params-no-descriptions").request)


@pytest.mark.integration
@pytest.mark.parametrize("case", ["deepseek-v3/tools", "mistral-nemo/tools", "command-r/plain"])
def test_the_new_models_render_the_golden_on_llama_server(pool, case):
    model = case.split("/")[0]
    golden = golden_of(case)
    assert list(engine_of(pool, "llama-server", model).ids(golden.request)) == golden.ids
