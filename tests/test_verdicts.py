"""Verdicts that say what was checked: an engine's HTTP refusal judged as a finding, both-refuse
as its own kind, reviewed causes (the edit language, the judge, stale causes, drifts grouped by
their first edit) and the advice on a body the reference normalized.

The fast tests judge committed goldens with answers made from them; the integration tests run
the real llama-server b11434 of the session's pool through `goldens check` and `goldens ledger`.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDENS, golden_of, server_of

from generator.cli import main
from generator.engines import Ids, Refused
from generator.errors import GoldensError
from generator.replay.running import check
from generator.replay.reporting import junit, markdown_report, results, terminal
from generator.replay.judging import causes
from generator.replay.judging.outcome import Outcome
from generator.replay.judging.verdict import verdict
from generator.replay.reporting.report import Summary, problems

BOS = causes.Edit("start", (), ((1, "<s>"),))


def cause(name="phi3-bos", edit=BOS, models=("phi3.5",), engines=("llama-server",)) -> causes.Cause:
    return causes.Cause(name, edit, list(engines), list(models), "the GGUF adds BOS")


def with_bos(case: str) -> Ids:
    golden = golden_of(case)
    return Ids([1, *golden.ids], pieces=["<s>", *golden.pieces])


# ------------------------------------------------------------------------- the edit language

def test_the_edit_language_is_exact_and_spelled_both_ways():
    insert = causes.parse("insert 1 at start", lambda ids: ["<s>"] * len(ids))
    assert insert == BOS and insert.apply([5, 6]) == [1, 5, 6]
    assert insert.describe() == "insert [1 '<s>'] at start" and insert.spelled() == "insert 1 at start"
    end = causes.parse("delete 2 at end")
    assert end.apply([1, 2]) == [1] and end.apply([1, 3]) is None  # never a near match
    every = causes.parse("replace 5*3,7 with 5,7 at every")
    assert every.apply([5, 5, 5, 7, 0, 5, 5, 5, 7]) == [5, 7, 0, 5, 7]
    assert every.apply([5, 5, 7]) is None  # no occurrence: the edit does not apply
    assert every.spelled() == "replace 5*3,7 with 5,7 at every"
    assert causes.parse(every.spelled()) == every
    for text, needle in [("insert 1 at every", "needs a run to replace"), ("insert 1 at middle", "expected `insert"),
                         ("replace 1 with 1 at start", "changes nothing"), ("insert x at start", "expected `insert")]:
        with pytest.raises(GoldensError, match=needle):
            causes.parse(text)


def test_the_first_edit_fully_explains_the_pair_or_is_none():
    pieces = list("abcdef")
    assert causes.first_edit([1, 2, 3], pieces, [9, 1, 2, 3], ["s", *pieces]) == causes.Edit(
        "start", (), ((9, "s"),))
    middle = causes.first_edit([1, 2, 3, 4], pieces, [1, 2, 7, 3, 4], ["a", "b", "x", "c", "d"])
    assert middle.describe() == "replace [2 'b', 3 'c'] with [2 'b', 7 'x', 3 'c'] at every"
    assert middle.apply([1, 2, 3, 4]) == [1, 2, 7, 3, 4]
    assert causes.first_edit([1, 2, 1, 2, 3], pieces, [1, 9, 2, 1, 2, 3], pieces) is None  # would apply twice
    assert causes.first_edit([1, 2], pieces, [1, 2], pieces) is None


def test_a_malformed_cause_file_is_one_line_naming_it(tmp_path):
    folder = tmp_path / causes.FOLDER
    folder.mkdir()
    good = json.loads(causes.dumps(cause()))
    for change, needle in [({"reason": " "}, "non-empty `reason`"), ({"models": []}, "`models` must be"),
                           ({"cause": "other"}, "`cause` must be 'phi3-bos'"),
                           ({"edit": {"at": "start", "replace": [], "with": [[1]]}}, "pairs"),
                           ({"edit": {"at": "every", "replace": [], "with": [[1, "<s>"]]}}, "needs a run")]:
        (folder / "phi3-bos.json").write_text(json.dumps({**good, **change}))
        with pytest.raises(GoldensError, match=needle) as error:
            causes.load(tmp_path)
        assert str(error.value).startswith(str(folder / "phi3-bos.json")) and "\n" not in str(error.value)
    (folder / "phi3-bos.json").write_text(causes.dumps(cause()))
    (loaded,) = causes.load(tmp_path, builtin=False)
    assert (loaded.name, loaded.edit, loaded.path) == ("phi3-bos", BOS, folder / "phi3-bos.json")
    assert [c.name for c in causes.covering(tmp_path, "llama-server@10429", "phi3.5") if not c.builtin] == ["phi3-bos"]
    assert not [c for c in causes.covering(tmp_path, "vllm", "phi3.5") + causes.covering(tmp_path, "llama-server", "qwen3")
                if not c.builtin]


# ------------------------------------------------------------------------------- the judge

def test_a_cause_makes_the_case_known_and_says_which_and_without_it_the_case_drifts():
    golden = golden_of("phi3.5/plain")
    known = verdict(golden, None, "llama-server", with_bos("phi3.5/plain"), causes=[cause()])
    assert (known.status, known.cause, known.reason) == ("known", "phi3-bos", "the GGUF adds BOS")
    assert known.detail.startswith("cause phi3-bos: insert [1 '<s>'] at start: ")
    drift = verdict(golden, None, "llama-server", with_bos("phi3.5/plain"))
    assert drift.status == "drift" and drift.cause is None
    assert drift.edit == BOS.data()
    other = verdict(golden, None, "llama-server", Ids([2, *golden.ids]), causes=[cause()])
    assert other.status == "drift"  # another token at the start is not that cause
    assert verdict(golden, None, "llama-server", Ids(golden.ids), causes=[cause()]).status == "match"


def test_both_refuse_passes_but_is_never_a_match_and_a_mostly_refusing_model_is_named():
    refusing = [c for c in ("gemma3/agentic-turn", "gemma3/tool-result", "gemma3/parallel-tool-calls")]
    outcomes = [verdict(golden_of(c), None, "transformers", Refused("transformers: template refused"))
                for c in refusing]
    outcomes.append(verdict(golden_of("gemma3/plain"), None, "transformers", Ids(golden_of("gemma3/plain").ids)))
    assert [o.status for o in outcomes] == ["both-refuse"] * 3 + ["match"]
    assert all(o.ok and o.refused for o in outcomes[:3])
    summary = Summary(outcomes)
    assert summary.exit_code() == 0
    assert summary.line() == "4 checked: 1 rendered and match, 3 both refuse, 0 known divergence, 0 drift, 0 error"
    (note,) = summary.refusals()
    assert note.startswith("gemma3: 3 of 4 checked cases both refuse, so only 1 rendered: the reference refused "
                           "with 'TemplateError: Conversation roles must alternate") and note.endswith("(3)")
    lines = terminal.terminal(summary)
    assert lines[-2:] == [note, summary.line()]
    text = markdown_report.markdown(summary)
    assert f"> {note}"[:60] in text and re.search(r"\| gemma3 \| agentic-turn +\| both refuse +\|", text)
    suite = ET.fromstring(junit.junit_xml(summary).split("\n", 1)[1])[0]
    out = suite.find("system-out").text.splitlines()
    assert [line.partition(" ")[0] for line in out] == refusing and all(": both refuse: " in line for line in out)
    # one in two refusing is not "mostly": no note
    assert Summary(outcomes[2:]).refusals() == []
    # the engine rendering what the reference refuses is still a drift
    rendered = verdict(golden_of(refusing[0]), None, "transformers", Ids([1, 2]))
    assert rendered.status == "drift"


def test_a_drift_on_a_normalized_body_says_what_the_reference_did_and_names_goldens_ledger():
    golden = golden_of("phi3.5/client-null-content")
    drift = verdict(golden, None, "llama-server@10429", with_bos("phi3.5/client-null-content"))
    assert drift.advice.startswith("the reference normalized this body before its template ran "
                                   '(messages[2].content: null passed as ""; '), drift.advice
    assert "as sent, the template refused (UndefinedError" in drift.advice
    assert drift.advice.endswith("goldens ledger --engine llama-server --case phi3.5/client-null-content "
                                 "--reason '...'")
    refused = verdict(golden, None, "minijinja", Refused("minijinja: template refused the request"))
    assert refused.status == "drift" and "goldens ledger --engine minijinja" in refused.advice
    assert verdict(golden_of("phi3.5/plain"), None, "llama-server", with_bos("phi3.5/plain")).advice == ""
    summary = Summary([drift])
    assert terminal.terminal(summary)[1] == "  " + drift.advice
    assert drift.advice in markdown_report.markdown(summary)
    assert drift.advice in junit.junit_xml(summary)


# ---------------------------------------------------------- stale causes and grouped drifts

def test_a_cause_no_case_shows_is_stale_and_fails_the_gate(tmp_path):
    causes.write(tmp_path, cause())
    shown = [Outcome("phi3.5/plain", "llama-server", "known", cause="phi3-bos")]
    assert check.stale_causes(tmp_path, "phi3.5", "llama-server", "llama-server", shown) == []
    matched = [Outcome("phi3.5/plain", "llama-server", "match")]
    (stale,) = check.stale_causes(tmp_path, "phi3.5", "llama-server", "llama-server", matched)
    assert (stale.case, stale.kind, stale.status, stale.cause) == ("phi3.5/causes:phi3-bos", "cause-stale", "drift",
                                                                   "phi3-bos")
    assert "none of its 1 checked cases shows that edit any more" in stale.detail
    # a group with an error may hide the case: no verdict on the cause
    errored = [*matched, Outcome("phi3.5/tools", "llama-server", "error", "boom")]
    assert check.stale_causes(tmp_path, "phi3.5", "llama-server", "llama-server", errored) == []
    summary = Summary([*matched, stale])
    assert summary.exit_code() == 1 and len(summary.verdicts) == 1
    assert summary.line().endswith("0 error; 1 stale cause (no case shows its edit any more)")
    assert terminal.terminal(summary)[0].startswith("DRIFT phi3.5/causes:phi3-bos [llama-server]: the reviewed cause")


def test_drifts_sharing_their_first_edit_are_one_group_and_one_row():
    cases = ["phi3.5/plain", "phi3.5/tools", "phi3.5/no-system"]
    drifts = [verdict(golden_of(c), None, "llama-server", with_bos(c)) for c in cases]
    other = verdict(golden_of("phi3.5/multi-turn"), None, "llama-server", Ids(golden_of("phi3.5/multi-turn").ids[1:]))
    summary = Summary([*drifts, other])
    groups = problems(summary.outcomes)
    assert [len(g) for g in groups] == [3, 1]
    lines = terminal.terminal(summary)
    assert lines[0] == ("DRIFT 3 cases [llama-server]: 3 drifts, one edit: insert [1 '<s>'] at start "
                        "(phi3.5/plain, phi3.5/tools, phi3.5/no-system); if it is accepted, record it once: "
                        "goldens ledger --cause NAME --edit 'insert 1 at start' --engine llama-server "
                        "--model phi3.5 --reason '...'")
    assert [line.split(" [")[0] for line in lines[1:4]] == [f"DRIFT {c}" for c in cases]
    text = markdown_report.markdown(summary)
    assert ("| drift at token 0 | phi3.5 | 3 cases | llama-server | one edit: `insert [1 '<s>'] at start` |"
            in re.sub(" +", " ", text))
    back = results.outcome_from(json.loads(json.dumps(results.outcome_data(drifts[0]))))
    assert back.edit == drifts[0].edit and problems([back, *drifts[1:]])[0] == [back, *drifts[1:]]


# ------------------------------------------------------------- on the real llama-server

UNTYPED_CALL = {  # a tool call without "type": llama-server b11434 answers HTTP 500
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ],
}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.integration
def test_a_llama_server_500_on_one_case_is_its_finding_and_the_rest_is_judged(workspace, pool):
    (workspace / "requests" / "client-untyped-call.json").write_text(json.dumps(UNTYPED_CALL))
    config, goldens = workspace / "models.yaml", workspace / "goldens"
    made = run("regenerate", "--config", config, "--goldens", goldens, "--model", "qwen3")
    assert made.exit_code == 0, made.output
    url = server_of(pool, "llama-server", "qwen3").url
    args = ("check", "--config", config, "--goldens", goldens, "--model", "qwen3", "--engine", "llama-server",
            "--url", f"llama-server={url}", "--jobs", 2)
    result = run(*args)
    # judged, not "could not judge": llama-server's HTTP 500 on a client's error is goldens' own
    # reviewed cause for every model (a refusal holding its text), and every other case is judged
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "Missing tool call type" not in result.stderr and "goldens: error" not in result.stderr
    assert re.search(r"known \[llama-server\]: the reviewed cause llama-server-http-500-on-client-errors "
                     r"explained \d+ case", result.stdout), result.stdout
    last = result.stdout.splitlines()[-1]
    checked = int(last.split(" checked")[0])
    assert last.endswith(" 0 drift, 0 error") and checked > 20, last


@pytest.mark.integration
def test_one_cause_covers_phi3_5_s_bos_on_llama_server_and_without_it_they_drift(tmp_path, pool):
    goldens = tmp_path / "goldens"
    shutil.copytree(GOLDENS / "phi3.5", goldens / "phi3.5")
    shutil.copytree(GOLDENS / causes.FOLDER, goldens / causes.FOLDER)
    url = server_of(pool, "llama-server", "phi3.5").url
    args = ("check", "--goldens", goldens, "--model", "phi3.5", "--engine", "llama-server",
            "--url", f"llama-server={url}", "--jobs", 2)
    committed = causes.read(goldens / causes.FOLDER / "phi3-gguf-bos.json")
    assert committed.all_edits == [BOS] and committed.engines == ["llama-server"] and committed.models == ["phi3.5"]
    # the goldens the reference renders (a case both refuse, Mistral's thinking part, is no edit)
    rendered = sorted(p.name.removesuffix(".json") for p in (goldens / "phi3.5").glob("*.json")
                      if p.name.count(".") == 1 and json.loads(p.read_text())["outcome"] == "ok")
    entries = sorted(p.name for p in (goldens / "phi3.5").glob("*.llama-server.json"))
    # the ones the cause does not fully explain: prefill and the dialect case that ends in an
    # assistant turn (both continued), two assistants at the end, null message fields, a tool
    # without type and a bare tool name as tool_choice (refused), and the three response_format
    # dialects the tiny GGUF's sampler refuses
    # one entry of its own (the trailing assistant turn, continued); the refusals and the prefill
    # are engine-level causes of their own now (goldens/causes/, issue #42)
    assert entries == ["plain_ends-assistant.llama-server.json"]

    result = run(*args)
    assert result.exit_code == 0, result.stdout
    said = re.search(r"known \[llama-server\]: the reviewed cause phi3-gguf-bos explained (\d+) cases", result.stdout)
    assert said, result.stdout
    explained = int(said[1])
    assert 0 < explained < len(rendered)  # most rendered goldens, not those other causes or entries explain

    (goldens / causes.FOLDER / "phi3-gguf-bos.json").unlink()
    result = run(*args)
    assert result.exit_code == 1, result.stdout
    assert result.stdout.startswith(f"DRIFT {explained} cases [llama-server]: {explained} drifts, one edit: "
                                    "insert [1 '<s>'] at start")
    assert result.stdout.count("DRIFT phi3.5/") == explained

    # a cause no case shows fails the gate as stale
    causes.write(goldens, cause("phi3-eos", causes.Edit("end", (), ((32000, "<|endoftext|>"),))))
    stale = run(*args)
    assert stale.exit_code == 1 and "DRIFT phi3.5/causes:phi3-eos [llama-server]: the reviewed cause" in stale.stdout
    (goldens / causes.FOLDER / "phi3-eos.json").unlink()

    # recorded again through `goldens ledger --cause`: the same file, and the gate passes
    recorded = run("ledger", "--goldens", goldens, "--engine", "llama-server", "--url", url, "--cause", "phi3-gguf-bos",
                   "--edit", "insert 1 at start", "--model", "phi3.5", "--reason", committed.reason,
                   "--class", committed.klass)
    assert recorded.exit_code == 0, recorded.output
    assert f"explains {explained} cases" in recorded.stdout
    assert causes.read(goldens / causes.FOLDER / "phi3-gguf-bos.json").all_edits == [BOS]
    assert run(*args).exit_code == 0
    nothing = run("ledger", "--goldens", goldens, "--engine", "llama-server", "--url", url, "--cause", "phi3-none",
                  "--edit", "insert 2 at start", "--model", "phi3.5", "--reason", "no case shows it",
                  "--class", "policy")
    assert nothing.exit_code == 2 and "shows the edit insert [2 '</s>'] at start; nothing recorded" in nothing.stderr
    assert not (goldens / causes.FOLDER / "phi3-none.json").exists()


# --------------------------------------------------------------- coverage counts what rendered

REFUSING = """{%- if messages[0].role == 'system' %}
{{- raise_exception('System role not supported') }}
{%- endif %}
{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def test_coverage_counts_only_what_the_reference_rendered(tmp_path):
    """A refusal ran the template up to its raise and checked no output: its lines are not
    covered. `plain` (a system message) refuses here, `no-system` renders."""
    (tmp_path / "small.jinja").write_text(REFUSING, encoding="utf-8")
    config = tmp_path / "models.yaml"
    config.write_text("models:\n  small:\n    tokenizer: {pack: \"npm:qwen3\"}\n    template: {file: small.jinja}\n"
                      "    shapes: {only: [plain, no-system]}\n    engines: [transformers]\n", encoding="utf-8")
    result = run("coverage", "--config", config, "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)["models"]["small"]
    assert (record["cases"], record["rendered"]) == (2, 1)
    assert [s["lines"] for s in record["never_executed"]] == [[2, 2]]  # the raise: only a refusal reached it
    assert "raise_exception" in record["never_executed"][0]["text"]
    text = run("coverage", "--config", config).stdout
    assert "executed by the 1 of 2 cases the reference rendered (1 refused, not counted)" in text
