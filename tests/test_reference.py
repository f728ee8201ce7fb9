"""The reference render against the measured figures and against Transformers' own tokenize path.

Everything goes through the real pieces: models.yaml -> generator.sources.source.resolve -> the pinned
offline pack's tokenizer files -> generator.reference. The figures are the ones measured with
transformers 5.24.0 and the npm Qwen3 / Gemma 3 tokenizers (see the foundation issue).
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import golden_of, matrix_marks, token_count

from generator import reference
from generator.cli import main
from generator.config import models, shapes
from generator.config.cases import matrix
from generator.errors import describe
from generator.goldens.regenerate import build
from generator.sources import source as sources

ROOT = Path(__file__).resolve().parents[1]
MODELS_YAML = ROOT / "models.yaml"

QWEN3_PLAIN_HEAD = [151644, 8948, 198, 2610, 525, 50537, 13, 151645, 198]
QWEN3_THINKING_OFF_TAIL = [151667, 271, 151668, 271]  # <think>\n\n</think>\n\n
GEMMA3_PLAIN_HEAD = [2, 105, 2364]  # <bos><start_of_turn>user


@pytest.fixture(scope="module")
def config():
    return models.load(MODELS_YAML)


class _Resolved(dict):
    """model name -> (Source, tokenizer), each loaded on first use and kept for the module: the
    fast tier asks three models, and fourteen tokenizers cost some 12 s of CPU to load."""

    def __init__(self, config):
        super().__init__()
        self.config = config

    def __missing__(self, name):
        source = sources.resolve(self.config.models[name], self.config)
        self[name] = value = (source, reference.load_tokenizer(source.tokenizer_dir))
        return value


@pytest.fixture(scope="module")
def resolved(config):
    return _Resolved(config)


def _render(resolved, config, model: str, shape: str, variant: str = ""):
    source, tokenizer = resolved[model]
    spec = config.models[model]
    request = shapes.build(shape, {**spec.kwargs, **spec.variants[variant]})
    return reference.render(tokenizer, source.template, request, config.date)


# --- the measured figures -------------------------------------------------------------------



def test_qwen3_plain_is_25_ids(resolved, config):
    result = _render(resolved, config, "qwen3", "plain")
    assert result.outcome == "ok", result.error
    assert len(result.ids) == 25
    assert result.ids[: len(QWEN3_PLAIN_HEAD)] == QWEN3_PLAIN_HEAD
    assert result.prompt == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert "".join(result.pieces) == result.prompt
    assert len(result.pieces) == len(result.ids)


def test_qwen3_tools_with_get_json_schema_tool_is_177_ids(resolved, config):
    request = shapes.build("tools", {})
    assert request["tools"] == [shapes.GET_WEATHER]
    assert set(request["tools"][0]["function"]) == {"name", "description", "parameters", "return"}
    result = _render(resolved, config, "qwen3", "tools")
    assert result.outcome == "ok", result.error
    assert len(result.ids) == 177
    assert result.ids[: len(QWEN3_PLAIN_HEAD)][:3] == QWEN3_PLAIN_HEAD[:3]


def test_qwen3_enable_thinking_false_is_29_ids(resolved, config):
    assert config.models["qwen3"].variants["thinking-off"] == {"enable_thinking": False}
    result = _render(resolved, config, "qwen3", "plain", "thinking-off")
    assert result.outcome == "ok", result.error
    assert len(result.ids) == 29
    assert result.ids[-4:] == QWEN3_THINKING_OFF_TAIL
    assert result.ids[:25] == _render(resolved, config, "qwen3", "plain").ids


def test_gemma3_plain_is_22_ids_with_one_bos(resolved, config):
    result = _render(resolved, config, "gemma3", "plain")
    assert result.outcome == "ok", result.error
    assert len(result.ids) == 22
    assert result.ids[:3] == GEMMA3_PLAIN_HEAD
    # The template writes <bos> and the tokenizer would add another: the reference must not.
    _, tokenizer = resolved["gemma3"]
    assert tokenizer("x", add_special_tokens=True)["input_ids"][0] == 2
    assert result.ids.count(2) == 1


# --- equal to Transformers' own tokenize=True path ---------------------------------------------


def _transformers_ids(tokenizer, template: str, request: dict, date: _dt.date):
    kwargs = dict(request["chat_template_kwargs"])
    with reference.frozen_date(date):  # templates that print today's date (gpt-oss, Llama 3.2)
        return tokenizer.apply_chat_template(
            request["messages"],
            tools=request.get("tools"),
            documents=request.get("documents"),
            chat_template=template,
            add_generation_prompt=request["add_generation_prompt"],
            continue_final_message=request["continue_final_message"],
            tokenize=True,
            return_dict=False,
            **kwargs,
        )


def _all_cases():
    return [pytest.param(case, id=case.id, marks=matrix_marks(case)) for case in matrix(models.load(MODELS_YAML))]


@pytest.mark.parametrize("case", _all_cases())
def test_render_equals_apply_chat_template_tokenize_true(case, resolved, config):
    """Our render encodes the prompt with add_special_tokens=False; that is exactly what
    apply_chat_template(tokenize=True) does, for every shape of the matrix, given the body as the
    serving layer hands it to the template (reference.normalize: content, developer, arguments)."""
    source, tokenizer = resolved[case.model]
    result = reference.render(tokenizer, source.template, case.request, config.date)
    request = reference.template_view(source.template, case.request)
    if result.outcome == "error":
        with pytest.raises(Exception) as raised:
            _transformers_ids(tokenizer, source.template, request, config.date)
        assert describe(raised.value) == result.error
        return
    assert _transformers_ids(tokenizer, source.template, request, config.date) == result.ids
    if not _strips_whitespace(tokenizer):
        assert tokenizer.decode(result.ids, skip_special_tokens=False) == result.prompt


def _strips_whitespace(tokenizer) -> bool:
    """Tokenizers whose added tokens swallow neighbouring whitespace (Phi-3's chat tokens rstrip)
    cannot decode back to the prompt; the golden's `roundtrip` record covers those."""
    return any(t.lstrip or t.rstrip for t in tokenizer.added_tokens_decoder.values())


def test_several_shapes_reach_the_comparison(config):
    """The parametrized comparison above covers different branches, not one shape many times."""
    ids = {case.id for case in matrix(config)}
    for shape in ("plain", "tools", "tool-result", "prefill", "cjk-emoji", "whitespace"):
        assert f"qwen3/{shape}" in ids
    assert "qwen3/plain--thinking-off" in ids
    assert "gemma3/image" in ids


# --- tool schema, errors, the fixed date, Transformers 5 return types --------------------------


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: The city name.
    """
    return "sunny"


def test_get_weather_is_what_get_json_schema_builds():
    from transformers.utils import get_json_schema

    assert get_json_schema(get_weather) == shapes.GET_WEATHER
    assert shapes.reduce_tool(shapes.GET_WEATHER)["function"].keys() == {"name", "description", "parameters"}


def test_template_that_raises_is_an_error_outcome(resolved, config):
    _, tokenizer = resolved["qwen3"]
    template = "{% if tools %}{{ raise_exception('tools are not supported') }}{% endif %}ok"
    failed = reference.render(tokenizer, template, shapes.build("tools", {}), config.date)
    assert failed.outcome == "error"
    assert failed.error == "TemplateError: tools are not supported"
    assert failed.ids == [] and failed.pieces == [] and failed.prompt is None
    fine = reference.render(tokenizer, template, shapes.build("plain", {}), config.date)
    assert fine.outcome == "ok" and fine.prompt == "ok"


def test_template_error_is_recorded_in_the_golden(tmp_path):
    (tmp_path / "m.yaml").write_text(
        "models:\n"
        "  strict:\n"
        '    tokenizer: {pack: "npm:qwen3"}\n'
        "    template: {inline: \"{{ raise_exception('no system role') }}\"}\n"
        "    shapes: [plain]\n",
        encoding="utf-8",
    )
    config = models.load(tmp_path / "m.yaml")
    goldens = build(config, list(config.models.values()))
    golden = goldens["strict/plain"]
    assert golden.outcome == "error"
    assert golden.error == "TemplateError: no system role"
    assert golden.ids == []


@pytest.mark.parametrize("date", [_dt.date(2026, 1, 15), _dt.date(1999, 12, 31)])
def test_fixed_date_reaches_strftime_now(resolved, date):
    _, tokenizer = resolved["qwen3"]
    result = reference.render(tokenizer, "{{ strftime_now('%Y-%m-%d') }}", shapes.build("plain", {}), date)
    assert result.outcome == "ok", result.error
    assert result.prompt == date.isoformat()


def test_models_yaml_date_reaches_strftime_now_in_the_golden(tmp_path):
    (tmp_path / "m.yaml").write_text(
        "date: 2024-02-29\n"
        "models:\n"
        "  dated:\n"
        '    tokenizer: {pack: "npm:qwen3"}\n'
        "    template: {inline: \"Today is {{ strftime_now('%d %b %Y') }}.\"}\n"
        "    shapes: [plain]\n",
        encoding="utf-8",
    )
    config = models.load(tmp_path / "m.yaml")
    golden = build(config, list(config.models.values()))["dated/plain"]
    assert golden.outcome == "ok", golden.error
    assert golden.prompt == "Today is 29 Feb 2024."
    assert golden.provenance["date"] == "2024-02-29"


def test_apply_chat_template_returns_batchencoding_unless_return_dict_false(resolved):
    """Transformers 5 changed tokenize=True to return a BatchEncoding; an upgrade that changes
    this again must be noticed, since engines compare plain id lists."""
    from transformers import BatchEncoding

    source, tokenizer = resolved["qwen3"]
    messages = shapes.build("plain", {})["messages"]
    as_dict = tokenizer.apply_chat_template(messages, chat_template=source.template,
                                            add_generation_prompt=True, tokenize=True)
    assert isinstance(as_dict, BatchEncoding)
    assert len(as_dict["input_ids"]) == token_count("qwen3/plain")
    as_list = tokenizer.apply_chat_template(messages, chat_template=source.template,
                                            add_generation_prompt=True, tokenize=True, return_dict=False)
    assert isinstance(as_list, list) and all(type(i) is int for i in as_list)
    assert as_list == list(as_dict["input_ids"])
    as_text = tokenizer.apply_chat_template(messages, chat_template=source.template,
                                            add_generation_prompt=True, tokenize=False)
    assert isinstance(as_text, str)


# --- the render command -------------------------------------------------------------------------


def test_render_command_prints_ids_pieces_prompt(tmp_path, resolved):
    request = tmp_path / "request.json"
    body = {"model": "ignored", "temperature": 0.2, "messages": [shapes.SYSTEM, shapes.QUESTION]}
    request.write_text(json.dumps(body), encoding="utf-8")
    result = CliRunner().invoke(
        main, ["render", "--config", str(MODELS_YAML), "--model", "qwen3", "--request", str(request)]
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == {"ids", "pieces", "prompt"}
    assert data["ids"] == golden_of("qwen3/plain").ids  # the plain shape's body: its golden
    assert "".join(data["pieces"]) == data["prompt"]

    body["chat_template_kwargs"] = {"enable_thinking": False}
    request.write_text(json.dumps(body), encoding="utf-8")
    result = CliRunner().invoke(
        main, ["render", "--config", str(MODELS_YAML), "--model", "qwen3", "--request", str(request)]
    )
    assert result.exit_code == 0, result.stderr
    ids = json.loads(result.stdout)["ids"]
    assert ids == golden_of("qwen3/plain--thinking-off").ids and ids[-4:] == QWEN3_THINKING_OFF_TAIL
