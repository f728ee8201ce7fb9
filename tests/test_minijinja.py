"""MiniJinja, set up as TGI sets it up, against the reference.

(Replaying every committed golden through it is test_replay_engines.py's job.) The llama.cpp
templates show the engine is not trivially equal to the reference: on each construct where
MiniJinja and Transformers' Jinja really differ, divergence.diverge names the token and the
character where they part.
"""

from __future__ import annotations

import copy
import dataclasses
import functools

import pytest
from conftest import CONFIG, source_of

from generator import reference
from generator.config import shapes
from generator.engines import EngineError, Refused
from generator.engines.minijinja.engine import MinijinjaEngine, tgi_template
from generator.goldens import golden_file
from generator.replay.judging import ledger
from generator.replay.judging.divergence import diverge
from generator.replay.judging.judge import judge
from generator.sources import pack

MODELS = [name for name, spec in CONFIG.models.items() if "minijinja" in spec.engines]


@functools.lru_cache(maxsize=None)
def engine_for(model: str) -> MinijinjaEngine:
    return MinijinjaEngine(source_of(model), CONFIG.date)


def test_the_matrix_replays_qwen3_and_gemma3_through_minijinja():
    assert {"qwen3", "gemma3"} <= set(MODELS)


# ------------------------------------------------ llama.cpp templates vs the reference render

def template(name: str) -> str:
    return (pack.llama_cpp_source() / "models" / "templates" / name).read_text(encoding="utf-8")


def both(template_text: str, request: dict):
    """The reference render and MiniJinja's, on Llama 3.1's tokenizer (it has a bos_token, which
    several templates need, and the fast tier loads it anyway); only the template varies."""
    source = dataclasses.replace(source_of("llama3"), template=template_text)
    expected = reference.render(reference.load_tokenizer(source.tokenizer_dir), template_text, request, CONFIG.date)
    assert expected.error is None, expected.error
    return expected, MinijinjaEngine(source, CONFIG.date)


def divergence(expected, actual):
    return diverge(expected.ids, expected.pieces, expected.prompt, actual, actual.pieces, actual.prompt)


def with_description(request: dict, description: str) -> dict:
    request = copy.deepcopy(request)
    request["tools"][0]["function"]["description"] = description
    return request


@pytest.mark.slow
def test_a_template_without_those_constructs_renders_identically():
    expected, engine = both(template("Qwen-Qwen3-0.6B.jinja"), shapes.build("tool-result", {}))
    assert divergence(expected, engine.ids(shapes.build("tool-result", {}))) is None


@pytest.mark.slow
def test_tojson_html_escaping_is_detected():
    """MiniJinja's tojson escapes < > & ' as \\u00XX (TGI adds no override); Transformers' json.dumps
    does not. Non-ASCII stays as is in both (ensure_ascii off), so the first difference is the '."""
    request = with_description(shapes.build("tools-reduced", {}), "Weather at the café in a city's square.")
    expected, engine = both(template("Qwen-Qwen3-0.6B.jinja"), request)
    actual = engine.ids(request)
    div = divergence(expected, actual)
    assert div is not None
    assert expected.prompt[div.char_index] == "'"
    assert actual.prompt[div.char_index:div.char_index + 6] == "\\u0027"
    assert "café in a city" in div.expected_text and "café in a city\\u0027s" in div.actual_text
    assert expected.pieces[div.index] != actual.pieces[div.index]


def test_tojson_ensure_ascii_keyword_is_refused():
    """`tojson(ensure_ascii=False)` (GLM, MiniMax, Kimi, StepFun...): MiniMax-M3 renders plain
    requests identically, and refuses as soon as a tool reaches that filter call."""
    expected, engine = both(template("MiniMax-M3.jinja"), shapes.build("plain", {}))
    assert divergence(expected, engine.ids(shapes.build("plain", {}))) is None
    request = shapes.build("tools-reduced", {})
    assert reference.render(reference.load_tokenizer(engine.source.tokenizer_dir), engine.source.template,
                            request, CONFIG.date).error is None
    with pytest.raises(Refused, match="unknown keyword argument 'ensure_ascii'"):
        engine.ids(request)


def test_indent_filter_dropping_the_trailing_newline_is_detected():
    """Command R+: `'{\\n'|indent(4, first=true)` is '    {\\n' in Jinja2, '    {' in MiniJinja."""
    request = shapes.build("tool-result", {})
    expected, engine = both(template("CohereForAI-c4ai-command-r-plus-tool_use.jinja"), request)
    actual = engine.ids(request)
    div = divergence(expected, actual)
    assert div is not None
    at = div.char_index
    assert expected.prompt[at - 5:at + 10] == '    {\n        "'  # the newline Jinja2 keeps
    assert actual.prompt[at - 5:at + 9] == '    {        "'


def test_trim_blocks_off_as_in_tgi_is_detected():
    """TGI keeps MiniJinja's defaults (no trim_blocks/lstrip_blocks): SmolLM3's template starts
    with the newline after its first `{% ... %}` tag, which Transformers trims."""
    request = shapes.build("plain", {})
    expected, engine = both(template("HuggingFaceTB-SmolLM3-3B.jinja"), request)
    actual = engine.ids(request)
    div = divergence(expected, actual)
    assert (div.index, div.char_index) == (0, 0)
    assert actual.prompt == "\n" + expected.prompt[: len(actual.prompt) - 1]
    assert actual.prompt.startswith("\n<|im_start|>system\n")


def test_length_of_none_is_refused():
    """Qwen3-Coder's `tools|length` with no tools: Jinja2 gives 0, MiniJinja an error."""
    request = shapes.build("plain", {})
    _, engine = both(template("Qwen3-Coder.jinja"), request)
    with pytest.raises(Refused, match="cannot calculate length of value of type none"):
        engine.ids(request)


def test_markup_concatenation_is_not_escaped():
    """Functionary v3.1 adds `'...'|safe + tool|tojson`: Jinja2's Markup escapes the JSON (&#34;),
    MiniJinja concatenates it as is."""
    request = shapes.build("tools-reduced", {})
    expected, engine = both(template("meetkai-functionary-medium-v3.1.jinja"), request)
    actual = engine.ids(request)
    div = divergence(expected, actual)
    assert div is not None
    assert div.expected_text.endswith("'\n{&#34;name&#34;: &#34;get_weather&#34;, &")
    assert div.actual_text.endswith('\'\n{"name": "get_weather", "description": "G')


def test_generation_tags_only_as_tgi_rewrites_them():
    """TGI deletes `{% generation %}` spelled exactly so; LFM2.5's `{%- generation -%}` stays and
    does not compile."""
    assert tgi_template("a{% generation %}b{% endgeneration %}c") == "abc"
    engine = MinijinjaEngine(dataclasses.replace(source_of("qwen3"), template=template("LFM2.5-8B-A1B.jinja")),
                             CONFIG.date)
    with pytest.raises(EngineError, match="does not compile: .*unknown statement generation"):
        engine.ids(shapes.build("plain", {}))


def test_functions_tgi_provides():
    """raise_exception refuses, strftime_now is the matrix's date, contrib's cycler is not there."""
    def render(text: str) -> str:
        source = dataclasses.replace(source_of("qwen3"), template=text)
        return MinijinjaEngine(source, CONFIG.date).render(shapes.build("plain", {}))

    assert render("{{ strftime_now('%d %b %Y') }}") == CONFIG.date.strftime("%d %b %Y")
    assert render("{{ eos_token }}|{{ bos_token is defined }}") == "<|im_end|>|False"
    with pytest.raises(Refused, match="raise_exception: nope"):
        render("{{ raise_exception('nope') }}")
    with pytest.raises(Refused):
        render("{{ cycler('a', 'b').next() }}")


def test_a_real_difference_recorded_in_the_ledger_replays_as_known(tmp_path):
    """The review loop on a divergence: drift with its position, then `known` once ledgered."""
    request = with_description(shapes.build("tools-reduced", {}), "Weather in a city's square.")
    source = source_of("qwen3")
    rendered = reference.render(reference.load_tokenizer(source.tokenizer_dir), source.template, request,
                                CONFIG.date)
    item = golden_file.Golden(case="qwen3/apostrophe", request=request, outcome="ok", ids=rendered.ids,
                                pieces=rendered.pieces, prompt=rendered.prompt, error=None, provenance={})
    engine = engine_for("qwen3")
    drift = judge(engine, item, tmp_path)
    assert drift.status == "drift" and "\\u0027" in drift.detail
    actual = engine.ids(request)
    ledger.write(tmp_path, item, engine.name, "tojson escapes ' as \\u0027", actual, actual.pieces,
                         actual.prompt)
    known = judge(engine, item, tmp_path)
    assert known.status == "known" and known.reason == "tojson escapes ' as \\u0027"
