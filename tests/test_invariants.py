"""Invariants of the reference's prompt (generator/analysis/invariants.py): a template that drops
a message or a call gets a finding, one that keeps everything gets none, and findings are
reviewed in models.yaml (`invariants:`)."""

from __future__ import annotations

import pytest
from conftest import CONFIG, golden_of, source_of, tokenizer_of

from generator import reference
from generator.analysis import invariants
from generator.config import shapes

KEEPS_ALL = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
             "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} {{ c.function.arguments | tojson }}"
             "</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
             "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _render(template: str, request: dict) -> str:
    result = reference.render(tokenizer_of("qwen3"), template, request, CONFIG.date)
    assert result.outcome == "ok", result.error
    return result.prompt


def test_a_template_that_keeps_everything_has_no_finding():
    request = shapes.build("parallel-tool-calls", {})
    found = invariants.of(KEEPS_ALL, request, _render(KEEPS_ALL, request))
    assert found.findings == [] and found.record() is None


def test_a_template_that_drops_a_message_or_a_call_gets_a_finding():
    drops_tools = KEEPS_ALL.replace("{% for m in messages %}", "{% for m in messages if m.role != 'tool' %}")
    drops_calls = KEEPS_ALL.replace("m.tool_calls or []", "[]")
    request = shapes.build("tool-result", {})
    found = invariants.of(drops_tools, request, _render(drops_tools, request)).findings
    assert found == [{"kind": "dropped-message", "at": "messages[3]", "detail": "tool message text not in the prompt"}]
    found = invariants.of(drops_calls, request, _render(drops_calls, request)).findings
    assert found == [{"kind": "dropped-tool-call", "at": "messages[2].tool_calls[0]",
                      "detail": "tool call get_weather dropped"}]


def test_arguments_are_found_in_any_spelling_but_not_when_lost():
    request = shapes.build("tool-result", {})
    spellings = {
        "python repr": KEEPS_ALL.replace("c.function.arguments | tojson", "c.function.arguments"),
        "own syntax": KEEPS_ALL.replace("{{ c.function.arguments | tojson }}",
                                        "{% for k, v in c.function.arguments.items() %}{{ k }}:<{{ v }}>{% endfor %}"),
    }
    for name, template in spellings.items():
        assert invariants.of(template, request, _render(template, request)).findings == [], name
    lost = KEEPS_ALL.replace("c.function.arguments | tojson", "'{}'")
    found = invariants.of(lost, request, _render(lost, request)).findings
    assert [f["detail"] for f in found] == ["tool call get_weather: argument city not in the prompt"]


def test_arguments_written_before_the_name_are_found():
    """A template that dumps the call's function object keeps the body's key order; Mistral's own
    client sends `arguments` before `name` (bench/outside/bodies2/pai-mistral-prefix-call.json)."""
    request = shapes.build("tool-result", {})
    dumps = KEEPS_ALL.replace("{{ c.function.name }} {{ c.function.arguments | tojson }}", "{{ c.function | tojson }}")
    for message in request["messages"]:
        for call in message.get("tool_calls") or []:
            call["function"] = {"arguments": call["function"]["arguments"], "name": call["function"]["name"]}
    assert invariants.of(dumps, request, _render(dumps, request)).findings == []
    lost = dumps.replace("{{ c.function | tojson }}", "{{ c.function.name }}")
    found = invariants.of(lost, request, _render(lost, request)).findings
    assert [f["detail"] for f in found] == ["tool call get_weather: argument city not in the prompt"]


def test_unbalanced_turns_and_order_are_findings_but_typed_delimiters_are_not():
    unclosed = KEEPS_ALL.replace("<|im_end|>\n{% endfor %}", "{% if m.role != 'tool' %}<|im_end|>{% endif %}\n{% endfor %}")
    request = shapes.build("tool-result", {})
    found = invariants.of(unclosed, request, _render(unclosed, request)).findings
    assert [f["kind"] for f in found] == ["unbalanced-turns"]
    reversed_ = KEEPS_ALL.replace("in messages", "in messages | reverse")
    request = shapes.build("multi-turn", {})
    kinds = {f["kind"] for f in invariants.of(reversed_, request, _render(reversed_, request)).findings}
    assert kinds == {"out-of-order"}
    request = shapes.build("control-text", {})  # the user types <|im_start|> ... <|im_end|>, <start_of_turn>
    assert invariants.of(KEEPS_ALL, request, _render(KEEPS_ALL, request)).findings == []


def test_reasoning_dropped_by_design_is_an_exemption_not_a_finding():
    request = shapes.build("reasoning-history", {})
    found = invariants.of(KEEPS_ALL, request, _render(KEEPS_ALL, request))
    assert found.findings == []
    assert found.exempt == ["messages[2].reasoning_content: reasoning not in the prompt (dropped by design)"]


@pytest.mark.parametrize("shape", ["tool-result", "tool-result-json-args", "parallel-tool-calls", "agentic-turn"])
def test_deepseek_v3_tool_call_goldens_carry_the_dropped_call(shape):
    item = golden_of(f"deepseek-v3/{shape}")
    details = [f["detail"] for f in invariants.findings_of(item.extra)]
    assert "tool call get_weather dropped" in details
    assert "get_weather" not in item.prompt  # the finding is true: the call is not in the prompt
    model = CONFIG.models["deepseek-v3"]
    judged = invariants.review({item.case: invariants.findings_of(item.extra)}, {"deepseek-v3": model.invariants})
    assert judged.unreviewed == [] and judged.known and "content is none" in judged.known[0][2]


def test_the_committed_goldens_record_what_the_reference_finds_now():
    """A golden's `invariants` record is the analysis of its own request and prompt."""
    for case in ("deepseek-v3/tool-result", "phi3.5/parallel-tool-calls", "qwen3/tool-result", "qwen3/reasoning-history"):
        item = golden_of(case)
        model = case.split("/")[0]
        expected = invariants.of(source_of(model).template, item.request, item.prompt).record()
        assert item.extra.get("invariants") == expected


def test_review_marks_known_unreviewed_and_stale():
    entry = invariants.Reviewed(finding="tool call * dropped", reason="by design", cases=("tool-*",))
    other = invariants.Reviewed(finding="system message text not in the prompt", reason="never happens")
    dropped = {"kind": "dropped-tool-call", "at": "messages[2].tool_calls[0]", "detail": "tool call f dropped"}
    judged = invariants.review({"m/tool-result": [dropped], "m/parallel": [dropped], "m/plain": []},
                               {"m": (entry, other)})
    assert judged.known == [("m/tool-result", dropped, "by design")]
    assert judged.unreviewed == [("m/parallel", dropped)]
    assert judged.stale == [("m", other)] and not judged.passed
    lines = judged.lines()
    assert lines[0].startswith("2 goldens carry 2 invariant findings (1 reviewed, 1 not")
    assert "  m/parallel (tool call f dropped): NOT REVIEWED" in lines


def test_models_yaml_reviews_parse_and_refuse_junk(tmp_path):
    from generator.config import models
    from generator.errors import GoldensError

    assert any(e.finding == "tool call * dropped" for e in CONFIG.models["deepseek-v3"].invariants)
    text = (tmp_path / "models.yaml")
    base = "models:\n  m:\n    tokenizer: {pack: 'npm:qwen3'}\n    invariants: "
    text.write_text(base + "[{finding: x}]\n")
    with pytest.raises(GoldensError, match=r"invariants\[0\]"):
        models.load(text)
    text.write_text(base + "[{finding: 'tool call * dropped', reason: ok, cases: [tool-*]}]\n")
    assert models.load(text).models["m"].invariants[0].cases == ("tool-*",)


def test_check_fails_on_an_unreviewed_finding_and_passes_a_reviewed_one(goldens_root):
    """`check` turns each unreviewed finding (and each stale entry) into a failing outcome in the
    `invariants` column, so the run exits 1; reviewed findings only add a note."""
    import dataclasses

    from generator.config.cases import model_cases
    from generator.replay.running import check
    from generator.replay.reporting.report import Summary

    model = CONFIG.models["deepseek-v3"]
    cases = [case.id for case in model_cases(model)]
    outcomes, notes = check.invariant_outcomes(goldens_root, model, cases)
    assert outcomes == [] and "0 not reviewed, 0 stale entries" in notes[0]
    bare = dataclasses.replace(model, invariants=())
    outcomes, notes = check.invariant_outcomes(goldens_root, bare, cases)
    assert {o.case for o in outcomes} >= {"deepseek-v3/tool-result", "deepseek-v3/agentic-turn"}
    assert all(o.engine == "invariants" and o.status == "drift" for o in outcomes)
    assert "tool call get_weather dropped" in outcomes[0].detail
    assert Summary(outcomes).exit_code() == 1
    stale = dataclasses.replace(model, invariants=(*model.invariants, invariants.Reviewed("gone", "fixed")))
    outcomes, _ = check.invariant_outcomes(goldens_root, stale, cases)
    assert [o.detail for o in outcomes] == [
        "stale models.yaml entry: models.deepseek-v3.invariants finding 'gone' matches no finding any more"]


def test_regenerate_lists_the_findings_of_goldens_it_did_not_render(goldens_root, snapshot):
    from generator.config.cases import model_cases
    from generator.goldens import review

    models = [CONFIG.models["deepseek-v3"], CONFIG.models["qwen3"]]
    goldens = {case.id: None for model in models for case in model_cases(model)}  # read back from disk
    lines = review.invariant_review(review.read_back(goldens_root, goldens), models).lines()
    assert lines[0] == snapshot  # how many goldens carry findings, dialect cases too: a reviewed figure
    assert "  deepseek-v3/parallel-tool-calls (tool call get_weather dropped; tool call get_time dropped): reviewed" in lines


def test_render_prints_the_finding_and_what_was_normalized(tmp_path):
    """`goldens render` of DeepSeek-V3 with a client's tool-call turn (no content key): the body
    renders (normalized), the JSON says what was normalized and found, stderr says the finding."""
    import json

    from click.testing import CliRunner

    from generator.cli import main

    body = shapes.build("tool-result-json-args", {})
    del body["messages"][2]["content"]
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    result = CliRunner().invoke(main, ["render", "--config", str(CONFIG.path), "--model", "deepseek-v3",
                                       "--request", str(path)])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["normalization"]["applied"][0] == 'messages[2].content: missing, passed as ""'
    assert data["invariants"]["findings"][0]["detail"] == "tool call get_weather dropped"
    assert result.stderr.splitlines() == [
        "goldens: invariant finding: messages[2].tool_calls[0]: tool call get_weather dropped"]
