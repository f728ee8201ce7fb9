"""Encoder references (docs/references.md): DeepSeek-V4's own encoding module, pinned from
vLLM's CPU wheel, renders every case beside the template (llama.cpp's Jinja port of the same
format); where they disagree the case is `disputed`, judged against no engine until
models.yaml's `references.disputes` says which reference is right.

The module comes from the cache (`make sources` fetches it: generator/sources/warm.py), so these
tests download nothing; the models are the npm DeepSeek-V3 tokenizer with the pinned V4 port,
as a team would declare them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, one_line_error

from generator import encoder
from generator.cli import main
from generator.config import models
from generator.config.cases import model_cases
from generator.files import sha256_of
from generator.goldens import golden_file
from generator.replay.reporting import results
from generator.replay.judging.outcome import Outcome
from generator.sources import encoders

REQUESTS = ROOT / "requests" / "references" / "deepseek-v4"
DSV4 = encoders.ENCODERS["deepseek-v4"]
ENGINES = ("transformers", "minijinja")


def write(tmp_path: Path, shapes: str = "[plain, prefill]", variants: str = "", references: str | None = None,
          name: str = "models.yaml") -> Path:
    """A team's models.yaml for DeepSeek-V4: the surrogate tokenizer, llama.cpp's V4 port, the
    encoder reference (`references` replaces its block; "" leaves it out) and the disputed
    request bodies of requests/references/deepseek-v4."""
    if not (tmp_path / "requests").exists():
        shutil.copytree(REQUESTS, tmp_path / "requests")
    block = "    references: {encoder: deepseek-v4}\n" if references is None else references
    (tmp_path / name).write_text(
        "date: 2026-01-15\nmodels:\n  dsv4:\n    tokenizer: {pack: \"npm:deepseek_v3\"}\n"
        "    template: {pack: \"llama.cpp:deepseek-ai-DeepSeek-V4.jinja\"}\n" + block
        + f"    shapes: {{only: {shapes.strip('[]').join('[]')}, requests: [requests/*.json]}}\n"
        + (f"    variants: {variants}\n" if variants else "") + f"    engines: [{', '.join(ENGINES)}]\n",
        encoding="utf-8")
    return tmp_path / name


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


SAID: dict[Path, str] = {}  # what each regenerate printed, by its --goldens


def regenerate(config: Path, out: Path):
    result = invoke("regenerate", "--config", str(config), "--goldens", str(out))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    SAID[out] = result.stdout
    loaded = models.load(config)
    return {case.id: golden_file.read(golden_file.golden_path(out, case.id))
            for case in model_cases(loaded.models["dsv4"])}


def disputed(goldens) -> list[str]:
    return sorted(case for case, item in goldens.items() if "disputed" in item.extra)


def test_the_encoder_is_the_pinned_module_run_without_vllm():
    """The module in the cache is the pinned member of the pinned wheel, and it runs alone:
    loading it imports nothing of vLLM and adds no module under its own name."""
    path = encoders.fetch(DSV4)
    assert sha256_of(path) == DSV4.sha256 and path.name == Path(DSV4.member).name
    module = encoder.load(path)
    assert callable(module.encode_messages)
    assert not any(name == "vllm" or name.startswith("vllm.") for name in sys.modules)
    assert module.__name__ not in sys.modules
    assert DSV4.artifact.sha256 in DSV4.origin and DSV4.sha256 in DSV4.origin


@pytest.mark.slow
def test_where_the_references_agree_a_golden_gains_its_provenance_line_only(tmp_path):
    """The built-in shapes, thinking off (the template's default) and on: the encoder renders
    every one as the port does, so each golden is the one the template alone gives plus the
    encoder's provenance line."""
    shapes, variants = "[plain, no-system, multi-turn, tools, tool-result, parallel-tool-calls, prefill]", \
        "{thinking: {thinking: true}, chat: {enable_thinking: false}}"
    both = regenerate(write(tmp_path, shapes, variants), tmp_path / "both")
    alone = regenerate(write(tmp_path, shapes, variants, references="", name="alone.yaml"), tmp_path / "alone")
    built_in = [case for case in both if case.split("/")[1].split("--")[0] in shapes]
    assert len(built_in) == 7 * 3 and not [case for case in built_in if "disputed" in both[case].extra]
    for case in built_in:
        item = both[case]
        assert item.provenance.pop("encoder") == DSV4.origin
        assert golden_file.dumps(item) == golden_file.dumps(alone[case]), case


def test_the_port_and_the_encoder_disagree_on_reasoning_effort_and_history(tmp_path):
    """The real disagreements (each a request of requests/references/deepseek-v4): llama.cpp's V4
    port writes the encoder's *high* effort paragraph when asked for `max` and none for `high`;
    it gathers every system message at the front where the encoder writes each in its place;
    and it keeps a past turn's reasoning whenever a tool message is in the history, where the
    encoder drops it unless the request defines tools."""
    goldens = regenerate(write(tmp_path), tmp_path / "goldens")
    module = encoder.load(encoders.fetch(DSV4))
    efforts = module.REASONING_EFFORT_PROMPTS
    assert disputed(goldens) == sorted(f"dsv4/{path.stem}" for path in REQUESTS.glob("*.json"))

    def sides(stem: str) -> tuple[str, str, dict]:
        item = goldens[f"dsv4/{stem}"]
        return item.prompt, item.extra["disputed"]["encoder"]["prompt"], item.extra["disputed"]

    template, encoded, record = sides("effort-max")
    assert efforts["high"] in template and efforts["max"] not in template and efforts["max"] in encoded
    assert [record["first_divergence"][side][1] for side in ("template", "encoder")] == [" Absolute", " Beyond"]
    template, encoded, _ = sides("effort-high")
    assert efforts["high"] not in template and encoded.startswith(module.bos_token + efforts["high"])
    template, encoded, _ = sides("second-system")
    assert "You are terse.\n\nAnswer in words.<｜User｜>" in template
    assert "<｜end▁of▁sentence｜>Answer in words.<｜User｜>" in encoded
    template, encoded, _ = sides("tool-history-no-tools")
    reasoning = json.loads((REQUESTS / "tool-history-no-tools.json").read_text())["messages"][2]["reasoning_content"]
    assert f"<think>{reasoning}</think>" in template and reasoning not in encoded
    for item in goldens.values():  # the record holds the encoder's every token, one per line
        if "disputed" in item.extra:
            text = golden_file.dumps(item)
            assert golden_file.dumps(golden_file.loads(text, item.case)) == text
            shown = item.extra["disputed"]["encoder"]
            assert len(re.findall(r"^        \[\d+, ", text, re.M)) == shown["token_count"] == len(shown["tokens"])


def test_check_reports_a_disputed_case_as_its_own_kind_and_exits_2(tmp_path):
    """Judged against no engine: each engine's verdict on a disputed case is DISPUTED (never a
    drift), the summary counts them, and the run exits 2: nothing was judged there."""
    goldens = regenerate(write(tmp_path), tmp_path / "goldens")
    stems = ", ".join(case.split("/")[1] for case in disputed(goldens))
    assert (f"dsv4: {len(disputed(goldens))} cases disputed between its references, not reviewed "
            f"(models.dsv4.references.disputes; docs/references.md): {stems}") in SAID[tmp_path / "goldens"]
    result = invoke("check", "--config", str(tmp_path / "models.yaml"), "--goldens", str(tmp_path / "goldens"),
                    "--junit", str(tmp_path / "goldens.xml"))
    assert result.exit_code == 2, result.stdout
    shown = sorted(re.findall(r"^DISPUTED (\S+) \[(\S+)\]", result.stdout, re.M))
    assert shown == sorted((case, engine) for case in disputed(goldens) for engine in ENGINES)
    assert "DRIFT" not in result.stdout and f"{len(shown)} disputed" in result.stdout
    assert "the template writes ' Absolute' (65174), the encoder ' Beyond' (30041)" in result.stdout
    junit = (tmp_path / "goldens.xml").read_text(encoding="utf-8")
    assert junit.count('type="disputed"') == len(shown) and 'type="drift"' not in junit


def test_a_reviewed_dispute_is_judged_against_the_reference_it_names(tmp_path):
    """`right: encoder` judges the engines against the encoder's outcome (both engines render the
    port, so they drift there), `right: template` against the golden's ids (they pass); a review
    that covers no disputed case any more is stale and fails."""
    goldens = regenerate(write(tmp_path), tmp_path / "goldens")
    others = [case.split("/")[1] for case in disputed(goldens) if case != "dsv4/effort-max"]

    def check(entries: str) -> tuple[int, str]:
        write(tmp_path, references="    references:\n      encoder: deepseek-v4\n      disputes:\n" + entries)
        result = invoke("check", "--config", str(tmp_path / "models.yaml"), "--goldens", str(tmp_path / "goldens"))
        return result.exit_code, result.stdout

    template = f"        - {{cases: [{', '.join(others)}], right: template, reason: the port is right here}}\n"
    code, out = check("        - {cases: [effort-max], right: encoder, reason: the port writes high under max}\n"
                      + template)
    assert code == 1 and "DISPUTED" not in out, out
    assert sorted(re.findall(r"^DRIFT (\S+) \[(\S+)\]", out, re.M)) == sorted(("dsv4/effort-max", e) for e in ENGINES)
    assert "[-' Beyond'-] {+' Absolute'+}" in out
    code, out = check("        - {cases: [effort-*], right: template, reason: the port is right here}\n" + template)
    assert code == 0, out
    code, out = check("        - {cases: [\"*\"], right: template, reason: the port is right here}\n"
                      "        - {cases: [plain], right: encoder, reason: no longer disputed}\n")
    assert code == 1 and "stale models.yaml entry: models.dsv4.references.disputes entry for plain" in out, out


@pytest.mark.parametrize("block, said", [
    ("    references: {encoder: deepseek-v9}\n", "models.dsv4.references.encoder: unknown encoder 'deepseek-v9' "
                                                  "(known: deepseek-v4)"),
    ("    references: {encoder: deepseek-v4, disputes: [{cases: [plain], right: both, reason: r}]}\n",
     "models.dsv4.references.disputes[0].right: both is not one of template, encoder"),
    ("    references: {encoder: deepseek-v4, disputes: [{cases: [plain], right: encoder}]}\n",
     "models.dsv4.references.disputes[0].reason: missing required key"),
    ("    references: {disputes: []}\n", "models.dsv4.references.encoder: missing required key"),
])
def test_a_bad_references_block_is_one_line(tmp_path, block, said):
    write(tmp_path, references=block)
    line = one_line_error(invoke("regenerate", "--config", str(tmp_path / "models.yaml"),
                                 "--goldens", str(tmp_path / "goldens")))
    assert said in line and not (tmp_path / "goldens").exists()


def test_a_disputed_verdict_survives_a_results_file():
    outcome = Outcome("dsv4/effort-max", "transformers", "disputed", "the references disagree", kind="disputed")
    again = results.outcome_from(json.loads(json.dumps(results.outcome_data(outcome))))
    assert (again.status, again.kind, again.ok) == ("disputed", "disputed", False)


@pytest.mark.slow
def test_the_pytest_plugin_fails_a_disputed_case_until_it_is_reviewed(tmp_path):
    """`pytest --goldens` judges as check does: each engine's disputed case fails with the
    references' disagreement, and the review makes the suite green."""
    goldens = regenerate(write(tmp_path), tmp_path / "goldens")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}

    def suite():
        return subprocess.run([sys.executable, "-m", "pytest", "--goldens", "-p", "no:cacheprovider", "-rA", "-q"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)

    run = suite()
    failed = sorted(line.split(" ")[1] for line in run.stdout.splitlines() if line.startswith("FAILED "))
    assert run.returncode == 1 and failed == sorted(f"models.yaml::{case}[{engine}]" for case in disputed(goldens)
                                                    for engine in ENGINES), run.stdout[-3000:]
    assert "the references disagree" in run.stdout
    write(tmp_path, references="    references:\n      encoder: deepseek-v4\n      disputes:\n"
                               "        - {cases: [\"*\"], right: template, reason: the port is right}\n")
    run = suite()
    assert run.returncode == 0, run.stdout[-3000:]


def test_a_group_with_a_disputed_case_calls_no_reviewed_cause_stale():
    """A disputed case was judged against no engine, so it may be the one a reviewed cause
    explains: its group, like one with an error, is not judged whole (check.stale_causes)."""
    from conftest import GOLDENS

    from generator.replay.running import check

    matched = [Outcome("phi3.5/plain", "llama-server", "match")]
    assert check.stale_causes(GOLDENS, "phi3.5", "llama-server", "llama-server", matched)  # the cause shows nowhere
    disputed_too = [*matched, Outcome("phi3.5/tools", "llama-server", "disputed", "…", kind="disputed")]
    assert check.stale_causes(GOLDENS, "phi3.5", "llama-server", "llama-server", disputed_too) == []


@pytest.mark.slow
def test_the_ledger_records_an_engine_against_the_reviewed_reference(tmp_path):
    """`goldens ledger` records what check judges: a case still disputed has nothing to record a
    divergence from (one line), and once reviewed `right: encoder`, an engine that renders the
    port is recorded against the encoder's ids, so check passes it as known."""
    goldens = regenerate(write(tmp_path), tmp_path / "goldens")
    paths = ["--config", str(tmp_path / "models.yaml"), "--goldens", str(tmp_path / "goldens")]

    def ledger(engine: str):
        return invoke("ledger", *paths, "--engine", engine, "--case", "dsv4/effort-max", "--class", "reference",
                      "--reason", "llama.cpp's V4 port writes the high effort paragraph under max")

    assert "the references disagree" in one_line_error(ledger("minijinja"))
    others = [case.split("/")[1] for case in disputed(goldens) if case != "dsv4/effort-max"]
    write(tmp_path, references="    references:\n      encoder: deepseek-v4\n      disputes:\n"
                               "        - {cases: [effort-max], right: encoder, reason: the port writes high under max}\n"
                               f"        - {{cases: [{', '.join(others)}], right: template, reason: the port is right}}\n")
    for engine in ENGINES:
        result = ledger(engine)
        assert result.exit_code == 0, (result.stdout, result.stderr)
    check = invoke("check", *paths)
    assert check.exit_code == 0, check.stdout
    assert f"{len(ENGINES)} reference ({len(ENGINES)} causes)" in check.stdout  # the two entries, class reference


def test_models_json_names_each_models_references(tmp_path):
    config = write(tmp_path, references="    references:\n      encoder: deepseek-v4\n      disputes:\n"
                                        "        - {cases: [effort-max], right: encoder, reason: the port is wrong}\n")
    result = invoke("models", "--config", str(config), "--json")
    assert result.exit_code == 0, result.stderr
    (model,) = json.loads(result.stdout)["models"]
    assert model["references"] == {"template": "transformers", "encoder": "deepseek-v4", "disputes": [
        {"cases": ["effort-max"], "right": "encoder", "reason": "the port is wrong"}]}
