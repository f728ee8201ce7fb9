"""The output axis: parse cases, the reference's output ids, chunk plans, the parse judge, parse
causes and `goldens parse` (docs/parse.md). The engines in this process (transformers serve's
parse path) are judged here; harmony's worker is an integration test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import CONFIG, GOLDENS, ROOT, golden_of, one_line_error, source_of
from generator import parse_reference, reference
from generator.cli import main
from generator.config import parse_cases
from generator.config.cases import PARSE, all_cases, parse_cases_of
from generator.engines import parse as parse_api
from generator.engines.pool import EnginePool
from generator.goldens import golden_file
from generator.replay.judging.parse import causes as parse_causes, findings as parse_findings, observation
from generator.replay.judging.parse import judge as parse_judge


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ------------------------------------------------------------------ chunk plans

@pytest.mark.parametrize("n", [1, 2, 3, 17, 64, 65, 914])
def test_every_plan_delivers_the_whole_output_once(n):
    plans = parse_cases.plans(n)
    assert plans[0] == parse_cases.Plan("whole", None)
    streamed = [p for p in plans if p.streamed]
    assert all(sum(p.sizes) == n and min(p.sizes) >= 1 for p in streamed)
    assert len({p.sizes for p in streamed}) == len(streamed) == len({p.name for p in streamed})
    splits = {p.sizes for p in streamed if len(p.sizes) == 2}
    every_split = {(k, n - k) for k in range(1, n)}
    assert (splits >= every_split) if n <= parse_cases.SPLITS_UP_TO else not any(
        p.name.startswith("split-") for p in streamed)
    assert parse_cases.plans(n) == plans  # seeded: the same plans every run


def test_a_stream_assembles_by_openai_s_rule():
    deltas = [[{"reasoning_content": "a"}], [], [{"content": "b"}, {"tool_calls": [{"index": 1, "name": "g"}]}],
              [{"tool_calls": [{"index": 0, "name": "f", "arguments": "{"}]}],
              [{"tool_calls": [{"index": 0, "name": "f", "arguments": "}"}, {"index": 1, "arguments": "[]"}]},
               {"finish_reason": "tool_calls"}]]
    assert parse_api.assemble(deltas) == {
        "content": "b", "reasoning_content": "a", "finish_reason": "tool_calls",
        "tool_calls": [{"name": "f", "arguments": "{}"}, {"name": "g", "arguments": "[]"}]}


# ------------------------------------------------------------------ the reference's output

def test_output_ids_are_the_render_after_the_generation_prompt_up_to_the_end_token():
    source, model = source_of("qwen3"), CONFIG.models["qwen3"]
    tokenizer = reference.load_tokenizer(source.tokenizer_dir)
    request = parse_cases.build("call", model.kwargs)
    split = parse_cases.split(request)
    prompt = reference.render(tokenizer, source.template, split.chat, CONFIG.date).ids
    full = reference.render(tokenizer, source.template, dict(
        split.chat, messages=[*split.chat["messages"], split.assistant], add_generation_prompt=False),
        CONFIG.date).ids
    end = tokenizer.convert_tokens_to_ids(model.parse.end[0])
    out = parse_reference.output_of(source, request, model.parse.end, CONFIG.date)
    assert full[:len(prompt)] == prompt and out.ids == full[len(prompt):full.index(end, len(prompt)) + 1]
    assert out.expected == {"content": None, "reasoning_content": None, "finish_reason": "tool_calls",
                            "tool_calls": [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]}
    assert out.how == {"from": "after the generation prompt", "end": "written"}


@pytest.mark.slow  # loads Gemma 3's 262k vocabulary, a model outside conftest.FAST_MODELS
def test_a_template_that_drops_a_call_makes_no_parse_case():
    out = parse_reference.output_of(source_of("gemma3"), parse_cases.build("call", {}),
                                    CONFIG.models["gemma3"].parse.end, CONFIG.date)
    assert out.outcome == "error" and "does not write tool call 0" in out.error
    assert "call" not in {case.shape for case in parse_cases_of(CONFIG.models["gemma3"])}


def test_a_cut_output_ends_half_way_with_finish_length():
    out = parse_reference.output_of(source_of("qwen3"), parse_cases.build("cut", {}),
                                    CONFIG.models["qwen3"].parse.end, CONFIG.date)
    full = parse_cases.SHAPES["cut"][1]()["messages"][-1]["content"]
    assert out.expected["finish_reason"] == "length"
    assert full.startswith(out.expected["content"]) and 0 < len(out.expected["content"]) < len(full)
    assert out.ids[-1] != reference.load_tokenizer(source_of("qwen3").tokenizer_dir).convert_tokens_to_ids("<|im_end|>")


def test_raw_output_text_is_tokenized_with_its_special_tokens():
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}],
            "output": "Hello.<|im_end|>"}
    request = parse_cases.validate(body, "test")
    out = parse_reference.output_of(source_of("qwen3"), request, ("<|im_end|>",), CONFIG.date)
    assert out.how == {"from": "text"} and out.pieces[-1] == "<|im_end|>" and out.text == body["output"]


def test_the_lock_records_the_shapes_each_template_writes():
    """Every locked parse case has a committed golden with output ids; every model's selection
    is locked (nothing left for `regenerate` to probe). A model with no `parse:` (the built-in
    families, no parse axis yet) has no parse case."""
    for model in CONFIG.models.values():
        if model.parse is None:
            assert parse_cases_of(model) == [] and not (GOLDENS / model.name / "parse").exists(), model.name
            continue
        assert model.parse.written is not None, model.name
        for case in parse_cases_of(model):
            item = golden_of(case.id)
            assert golden_file.is_parse(item) and item.outcome == "ok" and item.ids, case.id
            assert item.extra["expected"]["finish_reason"] in parse_cases.FINISH_REASONS


def test_a_model_whose_template_writes_no_call_is_sent_no_tools():
    """Its clients send none, and a server with no tool parser for it refuses a body that does;
    a model whose template writes a call is sent the tools in every parse case."""
    for model in CONFIG.models.values():
        cases = [c for c in parse_cases_of(model) if c.variant]  # the built-in shapes
        writes_calls = any(c.request["messages"][-1].get("tool_calls") for c in cases)
        assert all(("tools" in c.request) == writes_calls for c in cases), model.name
    assert parse_cases.calls("call") and not parse_cases.calls("answer")
    assert "tools" not in parse_cases.build("call", {}, tools=False) and "tools" in parse_cases.build("answer", {})


# ------------------------------------------------------------------ the judge

def test_arguments_are_equal_as_json_values_with_their_types():
    calls = lambda text: {"tool_calls": [{"name": "f", "arguments": text}]}  # noqa: E731
    assert observation.differences(calls('{"a": 1, "b": "x"}'), calls('{"b":"x","a":1}')) == []
    assert observation.differences(calls('{"a": 1}'), calls('{"a": true}'))
    assert observation.differences(calls('{"a": 1}'), calls('{"a": 1.0}'))
    assert observation.differences(calls("not json"), calls("not json")) == []


def test_a_delimiter_in_a_content_delta_is_a_violation_unless_the_content_holds_it():
    deltas = [[{"content": "ok"}], [{"content": "<|im_end|>"}]]
    assert observation.violations(deltas, {"content": "ok"}, ["<|im_end|>"]) == [
        "content delta holds '<|im_end|>' (step 1)"]
    assert observation.violations(deltas, {"content": "ok<|im_end|>"}, ["<|im_end|>"]) == []


@pytest.fixture(scope="module")
def qwen3_transformers():
    with EnginePool(CONFIG.date) as pool:
        yield pool.engine("transformers", CONFIG.models["qwen3"], source_of("qwen3"))


@pytest.mark.slow  # the whole of a model's parse cases, every plan
def test_the_committed_qwen3_parse_goldens_pass_on_transformers(qwen3_transformers):
    """Each is parsed as expected or explained by a reviewed parse cause, whichever the cause
    files say: the gate's own judgement."""
    for case in parse_cases_of(CONFIG.models["qwen3"]):
        outcome = parse_judge.judge(qwen3_transformers, golden_of(case.id), GOLDENS)
        assert outcome.ok and outcome.axis == "parse", (case.id, outcome.detail)


def test_a_parse_that_differs_from_the_expected_message_is_drift_with_its_findings(qwen3_transformers, tmp_path):
    item = golden_of("qwen3/parse/call")
    item.extra["expected"]["tool_calls"][0]["arguments"] = '{"city": "Lyon"}'
    outcome = parse_judge.judge(qwen3_transformers, item, tmp_path)  # no causes here
    assert outcome.status == "drift"
    assert outcome.detail.startswith('whole: tool_calls[0].arguments: expected "{\\"city\\": \\"Lyon\\"}"')
    assert "whole tool_calls[*].arguments: other" in outcome.edit["findings"]


def test_a_parse_cause_explains_only_cases_whose_findings_it_lists(qwen3_transformers, tmp_path):
    item = golden_of("qwen3/parse/call")
    observed = observation.observe(qwen3_transformers, item)
    found = parse_findings.findings(item, observed)
    assert found  # transformers serve's stream keeps what its whole answer strips (a reviewed cause)
    cause = parse_causes.Cause("c", ("transformers",), ("qwen3",), tuple(found), "why")
    assert parse_judge.verdict(item, None, "transformers", observed, [cause]).kind == "known"
    partial = parse_causes.Cause("c", ("transformers",), ("qwen3",), tuple(found[1:]) or ("other",), "why")
    assert parse_judge.verdict(item, None, "transformers", observed, [partial]).kind == "drift"


def test_a_reviewed_parse_entry_passes_until_the_engine_moves(qwen3_transformers, tmp_path):
    item = golden_of("qwen3/parse/call")
    (tmp_path / "qwen3" / "parse").mkdir(parents=True)
    path = parse_judge.record(qwen3_transformers, item, tmp_path, "reviewed here")
    assert path.name == "call.transformers.json"
    assert parse_judge.judge(qwen3_transformers, item, tmp_path).kind == "known"
    data = json.loads(path.read_text())
    data["parse"]["whole"]["content"] = "something else"
    path.write_text(json.dumps(data))
    assert parse_judge.judge(qwen3_transformers, item, tmp_path).kind == "ledger-moved"


# ------------------------------------------------------------------ check and the command

@pytest.mark.slow  # the whole of a model's parse cases, every plan
def test_check_judges_parse_cases_beside_render_cases(workspace):
    result = invoke("check", "--config", workspace / "models.yaml", "--goldens", workspace / "goldens",
                    "--engine", "transformers", "--model", "qwen3", "--axis", "parse", "--json")
    assert result.exit_code == 0, result.stderr
    outcomes = [o for g in json.loads(result.stdout)["groups"] for o in g["outcomes"]]
    assert {o["case"] for o in outcomes} == {c.id for c in parse_cases_of(CONFIG.models["qwen3"])}
    assert {o["axis"] for o in outcomes} == {"parse"}


@pytest.mark.slow  # the whole of a model's parse cases, every plan
def test_a_parse_cause_no_case_shows_any_more_is_stale(workspace):
    cause = parse_causes.Cause("gone", ("transformers",), ("qwen3",), ("whole content: missing",), "fixed upstream")
    parse_causes.write_cause(workspace / "goldens", cause)
    result = invoke("check", "--config", workspace / "models.yaml", "--goldens", workspace / "goldens",
                    "--engine", "transformers", "--model", "qwen3", "--axis", "parse")
    assert result.exit_code == 1 and "reviewed parse cause gone covers transformers on qwen3" in result.stdout


def test_goldens_parse_judges_one_request_file(tmp_path):
    body = tmp_path / "call.json"
    body.write_text(json.dumps(parse_cases.build("parallel-calls", {})))
    result = invoke("parse", "--model", "qwen3", "--request", body, "--engine", "transformers", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code in (0, 1) and report["format"] == "goldens.parse/1"
    (entry,) = report["engines"]
    assert entry["engine"] == "transformers" and len(entry["plans"]) >= 3
    assert entry["whole"]["tool_calls"] == report["expected"]["tool_calls"] or entry["status"] == "drift"
    assert [t[0] for t in report["output"]["tokens"]] and report["expected"]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("body, said", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "ends in the assistant message"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}], "output": 3},
     "`output` is the text the model emitted"),
])
def test_goldens_parse_refuses_a_body_that_is_no_parse_case_in_one_line(tmp_path, body, said):
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    line = one_line_error(invoke("parse", "--model", "qwen3", "--request", path))
    assert said in line


def test_goldens_parse_says_when_an_engine_has_no_parse_path(tmp_path):
    path = tmp_path / "body.json"
    path.write_text(json.dumps(parse_cases.build("answer", {})))
    line = one_line_error(invoke("parse", "--model", "gemma3", "--request", path, "--engine", "minijinja"))
    assert "minijinja has no parse path" in line


@pytest.mark.integration  # harmony's venv and worker
def test_harmony_parses_every_gpt_oss_parse_golden_as_expected(tmp_path):
    with EnginePool(CONFIG.date) as pool:
        engine = pool.engine("harmony", CONFIG.models["gpt-oss"], source_of("gpt-oss"))
        for case in parse_cases_of(CONFIG.models["gpt-oss"]):
            outcome = parse_judge.judge(engine, golden_of(case.id), tmp_path)
            assert outcome.status == "match", (case.id, outcome.detail)


def test_a_run_of_parse_cases_alone_calls_no_render_cause_stale():
    """`--axis parse` judges no render case, so no render cause covering the engine is stale for
    want of one (vLLM's covering qwen3 are); a render case judged without them still says so."""
    from generator.replay.judging import causes
    from generator.replay.running.check import stale_causes
    from generator.replay.judging.outcome import Outcome

    render = [c.name for c in causes.covering(GOLDENS, "vllm", "qwen3") if not c.builtin]
    assert render  # the matrix has render causes for vLLM on qwen3 to be stale or not
    parsed = [Outcome("qwen3/parse/answer", "vllm", "match", axis="parse")]
    assert not [o for o in stale_causes(GOLDENS, "qwen3", "vllm", "vllm", parsed) if o.axis != "parse"]
    rendered = [Outcome("qwen3/plain", "vllm", "match")]
    assert {o.cause for o in stale_causes(GOLDENS, "qwen3", "vllm", "vllm", rendered)} >= set(render)


def test_a_case_several_causes_explain_takes_the_engine_defect_class_first():
    """A gate on engine-defect sees a case one defect and one policy explain together."""
    from generator.replay.judging.causes import CLASSES

    policy = parse_causes.Cause("p", ("e",), ("m",), ("whole content: whitespace",), "r", klass="policy")
    defect = parse_causes.Cause("d", ("e",), ("m",), ("whole finish_reason: tool_calls -> stop",), "r",
                               klass="engine-defect")
    assert parse_judge._klass([policy, defect]) == parse_judge._klass([defect, policy]) == "engine-defect"
    assert list(CLASSES)[0] == "engine-defect"


def test_an_engine_as_chosen_without_a_parse_path_is_asked_no_parse_case():
    """Another Transformers release parses nothing (only the installed one does), and a
    llama-server given --url has no parse harness: their groups hold render cases only, while
    the installed ones and vLLM through a --url keep theirs."""
    from generator.config.engine_spec import EngineSpec
    from generator.replay.running import check

    model = CONFIG.models["qwen3"]
    specs = [EngineSpec("transformers"), EngineSpec("transformers", "4.57.6"), EngineSpec("llama-server"),
             EngineSpec("vllm")]
    urls = {"llama-server": "http://127.0.0.1:1", "vllm": "http://127.0.0.1:2"}
    parsed = {spec.label: sum(1 for c in ids if "/parse/" in c)
              for _, spec, ids in check.groups(CONFIG, [("qwen3", specs)], urls=urls)}
    n = len(parse_cases_of(model))
    assert parsed == {"transformers": n, "transformers@4.57.6": 0, "llama-server": 0, "vllm": n}
    local = {spec.label: sum(1 for c in ids if "/parse/" in c)
             for _, spec, ids in check.groups(CONFIG, [("qwen3", [EngineSpec("llama-server")])])}
    assert local == {"llama-server": n}
