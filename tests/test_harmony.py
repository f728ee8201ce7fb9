"""openai-harmony (vLLM's gpt-oss renderer) against gpt-oss's Jinja reference, and the
o200k_base.tiktoken it needs, rebuilt from npm js-tiktoken.

The expansion of js-tiktoken's compressed ranks is checked on small inputs (fast); the real
file is rebuilt from the pinned package and must carry harmony's sha256, and the real harmony
worker (its venv, one process for the module) must render gpt-oss cases: the same ids as the
golden where both renderers agree, and the reviewed differences where they do not.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import CONFIG, golden_of, source_of, tier

from generator.engines import EngineContext, Refused
from generator.engines.harmony.engine import HarmonyEngine
from generator.errors import GoldensError
from generator.files import sha256_of
from generator.sources import tiktoken_ranks


def test_expand_writes_one_line_per_rank_in_rank_order():
    # two compressed lines, the second continuing the first's ranks
    assert tiktoken_ranks.expand("! 0 IQ== Ig==\n# 2 Iw==\n") == b"IQ== 0\nIg== 1\nIw== 2\n"


@pytest.mark.parametrize("compressed, message", [
    ("! 0 IQ==\n# 2 Iw==\n", "not consecutive"),
    ("! 0 IQ== Ig==\n# 1 Iw==\n", "rank 1 given twice"),
    ("! x IQ==\n", "is not a rank"),
])
def test_expand_refuses_ranks_that_are_not_a_vocabulary(compressed, message):
    with pytest.raises(GoldensError, match=message):
        tiktoken_ranks.expand(compressed)


@pytest.mark.integration
def test_rebuilt_o200k_base_carries_harmonys_sha256():
    path = tiktoken_ranks.o200k_base_dir() / tiktoken_ranks.O200K_BASE
    assert sha256_of(path) == tiktoken_ranks.O200K_BASE_SHA256
    lines = path.read_bytes().splitlines()
    assert len(lines) == 199998 and lines[0] == b"IQ== 0"  # '!' is rank 0


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # harmony's worker in its own venv
def harmony():
    engine = HarmonyEngine(EngineContext(name="harmony", model="gpt-oss", source=source_of("gpt-oss"),
                                         date=CONFIG.date))
    yield engine
    engine.close()


def _request(case_id: str) -> dict:
    return golden_of(case_id).request


@pytest.mark.integration
def test_harmony_renders_what_the_template_renders_without_a_system_prompt(harmony):
    golden = golden_of("gpt-oss/no-system")
    ids = harmony.ids(golden.request)
    assert list(ids) == golden.ids
    assert ids.prompt.startswith("<|start|>system<|message|>You are ChatGPT") and "Current date: 2026-01-15" in ids.prompt
    assert harmony.version() == "0.0.8"


@pytest.mark.integration
def test_harmony_ends_developer_instructions_without_the_templates_blank_line(harmony):
    golden = golden_of("gpt-oss/plain")
    ids = harmony.ids(golden.request)
    assert "# Instructions\n\nYou are terse.<|end|>" in ids.prompt
    assert "# Instructions\n\nYou are terse.\n\n<|end|>" in golden.prompt
    assert list(ids[:70]) == golden.ids[:70] and ids[70] != golden.ids[70]  # '.' where the golden has '.\n\n'
    assert list(ids[71:]) == golden.ids[71:]


@pytest.mark.integration
def test_harmony_refuses_object_arguments_and_renders_string_arguments_raw(harmony):
    with pytest.raises(Refused, match="arguments"):
        harmony.ids(_request("gpt-oss/tool-result"))
    ids = harmony.ids(_request("gpt-oss/tool-result-json-args"))
    assert '<|message|>{"city": "Paris"}<|call|>' in ids.prompt
    assert "<|message|>sunny, 21 C<|end|>" in ids.prompt


@pytest.mark.integration
def test_harmony_reads_reasoning_content_as_vllm_renames_it(harmony):
    request = json.loads(json.dumps(_request("gpt-oss/agentic-turn")))
    ids = harmony.ids(request)
    assert "<|channel|>analysis<|message|>The user wants the weather in Paris." in ids.prompt
    request["messages"][2]["thinking"] = request["messages"][2].pop("reasoning_content")
    assert "<|channel|>analysis" not in harmony.ids(request).prompt  # 'thinking' is not vLLM's field


@pytest.mark.integration
def test_harmony_refuses_a_model_of_another_vocabulary():
    context = EngineContext(name="harmony", model="qwen3", source=source_of("qwen3"), date=CONFIG.date)
    with pytest.raises(GoldensError, match="o200k_harmony"):
        HarmonyEngine(dataclasses.replace(context))
