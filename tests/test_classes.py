"""Verdicts a team can act on (issue 42): classes, causes over cases, engine defects with reports,
engine-level causes on a team's own model, the `gate:` a team sets, and the review of a new
model's invariant findings."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT, golden_of, source_of

from generator.analysis import invariants
from generator.cli import main
from generator.engines import Ids, Refused
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.replay.judging import causes, gate, ledger, verdict
from generator.replay.judging.parse import causes as parse_causes
from generator.replay.reporting import defects

# Meta-Llama-3-8B-Instruct's template: content only, so an assistant tool call is dropped
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
DEFECTS = ("llama-server-http-500-on-client-errors", "llama-server-refuses-trailing-tool-call",
           "vllm-non-json-arguments-become-empty-object")


def entries(root: Path = GOLDENS) -> list[ledger.Entry]:
    out = []
    for path in sorted(root.glob("*/*.*.json")):
        if path.parent.name == causes.FOLDER:
            continue
        stem, engine, *rest = path.name[:-len(".json")].split(".")
        out.append(ledger.read(root, f"{path.parent.name}/{stem}", engine, stand_in=bool(rest)))
    return out


def test_no_two_entries_or_causes_share_a_reason():
    """An entry that shares a cause names it; the reason is said once, in the cause."""
    own = [json.loads(e.path.read_text())["reason"] for e in entries() if not e.cause]
    said = own + [c.reason for c in causes.load(GOLDENS)]
    repeated = [text[:80] for text, n in Counter(said).items() if n > 1]
    assert not repeated and len(said) > 100


def test_every_entry_and_cause_has_a_class_and_every_defect_a_report_or_link():
    """Render causes and parse causes (goldens/causes/parse/) alike: an engine-defect names its
    upstream issue or has the report `goldens ledger --report` wrote beside it."""
    assert {e.klass for e in entries()} <= set(causes.CLASSES)
    for cause in [*causes.load(GOLDENS), *parse_causes.load_causes(GOLDENS)]:
        assert cause.klass in causes.CLASSES, cause.name
        if cause.klass == "engine-defect":
            assert cause.upstream or (cause.report and (cause.path.parent / cause.report).is_file()), cause.name
    reports = sorted((GOLDENS / causes.FOLDER / parse_causes.CAUSES).glob("*.report.md"))
    assert {p.name for p in reports} == {c.report for c in parse_causes.load_causes(GOLDENS) if c.report}
    for path in reports:
        text = path.read_text(encoding="utf-8")
        assert all(f"\n{part}" in text for part in ("## Reproduce (", "## Expected", "## Actual",
                                                     "- First release with it: ", "Parsed through: ")), path.name
    assert "no upstream issue or report yet" not in "\n".join(defects.summary_lines(defects.summary(GOLDENS)))


@pytest.mark.slow  # transformers serve's parse of the cause's cases, every plan, in this process
@pytest.mark.parametrize("name", ["transformers-stream-unstripped", "transformers-unclosed-call-fails"])
def test_a_parse_cause_report_is_written_from_the_engines_answer(tmp_path, name):
    """`goldens ledger --report` on a parse cause replays one case it explains through its engine
    and writes the report beside it: the case's output ids and request, the route it was parsed
    through, the golden's expected message; the committed report (reviewed) is what it writes
    again, and the cause names it."""
    cause = parse_causes.named_cause(GOLDENS, name)
    for model in cause.models:
        shutil.copytree(GOLDENS / model / "parse", tmp_path / model / "parse")
    folder = tmp_path / causes.FOLDER / parse_causes.CAUSES
    folder.mkdir(parents=True)
    data = json.loads(cause.path.read_text(encoding="utf-8"))
    data.pop("report", None)
    (folder / cause.path.name).write_text(json.dumps(data, indent=2), encoding="utf-8")
    result = CliRunner().invoke(main, ["ledger", "--goldens", str(tmp_path), "--report", name])
    assert result.exit_code == 0, result.output
    written = (folder / causes.report_name(name)).read_text(encoding="utf-8")
    assert parse_causes.named_cause(tmp_path, name).report == causes.report_name(name)
    assert written == (cause.path.parent / causes.report_name(name)).read_text(encoding="utf-8")
    case = written.split("## Reproduce (", 1)[1].split(")", 1)[0]
    assert case in cause.explains
    item = golden_of(case)
    assert json.dumps(list(item.ids)) in written and json.dumps("".join(item.pieces), ensure_ascii=False) in written
    assert json.dumps(item.request, indent=2, ensure_ascii=False) in written
    response = CONFIG.models[item.model].parser("transformers", "response")
    assert f"with the `{response}` response template" in written
    expected = written.split("## Expected", 1)[1].split("## Actual", 1)[0]
    assert json.dumps(item.extra["expected"].get("content"), ensure_ascii=False) in expected
    actual = written.split("## Actual", 1)[1]
    assert ("refuses it" in actual) == any(f.startswith("refused") for f in cause.findings)


def test_a_parse_report_names_a_case_the_cause_covers(tmp_path):
    """A --case outside the cause's models is one line (exit 2), nothing written."""
    name = "transformers-stream-unstripped"
    result = CliRunner().invoke(main, ["ledger", "--goldens", str(GOLDENS), "--report", name,
                                       "--case", "gemma4/parse/answer"])
    assert result.exit_code == 2 and "not a case the cause covers" in result.output, result.output


def test_the_three_hidden_bugs_are_engine_defects_with_reports():
    for name in DEFECTS:
        cause = causes.named(GOLDENS, name)
        assert cause is not None and cause.klass == "engine-defect", name
        report = (cause.path.parent / cause.report).read_text(encoding="utf-8")
        assert "## Reproduce" in report and "## Expected" in report and "## Actual" in report
        assert "First release with it: " in report
    trailing = causes.named(GOLDENS, "llama-server-refuses-trailing-tool-call")
    assert trailing.builtin and trailing.models == [causes.ANY_MODEL]  # an engine's, for every model
    first = defects.first_release(ROOT / "docs" / "atlas", "llama-server", trailing, list(trailing.cases))
    assert first.startswith("b10630 ")  # the atlas's change point with that refusal, after b10622


@pytest.mark.slow
def test_the_ledger_counts_causes_over_cases_and_classes():
    result = CliRunner().invoke(main, ["ledger", "--goldens", str(GOLDENS), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    every = entries()
    own = [e for e in every if not e.cause]
    assert len(data["single_entries"]) == len(own)
    shared = Counter(name for e in every for name in e.cause)
    parse = {c.name: c for c in parse_causes.load_causes(GOLDENS)}  # the output side's (goldens/causes/parse/)
    for row in data["reviewed_causes"]:
        cause = causes.named(GOLDENS, row["cause"])
        if cause is None:  # a parse cause counts the cases it explained when it was recorded
            assert row["cases"] == len(parse[row["cause"]].explains) and row["class"] == parse[row["cause"]].klass
            continue
        assert row["cases"] == len(cause.cases) + shared[row["cause"]] and row["class"] == cause.klass
    assert data["causes"] == len(data["reviewed_causes"]) + len(own) < data["cases"]
    assert sum(data["classes"].values()) == data["causes"] and data["classes"]["engine-defect"] >= len(DEFECTS)
    text = CliRunner().invoke(main, ["ledger", "--goldens", str(GOLDENS)]).stdout
    assert text.startswith(f"ledger: {data['causes']} causes over {data['cases']} cases (")


def test_a_cause_explains_a_refusal_by_its_text_and_names_its_class():
    item = golden_of("qwen3/multi-turn_null-fields")
    cause = causes.named(GOLDENS, "llama-server-http-500-on-client-errors")
    refusal = Refused('llama-server at <server>/v1/chat/completions: HTTP 500: {"error":{"code":500,"message":'
                      '"Failed to parse messages: [json.exception.type_error.302] type must be string"}}')
    outcome = verdict.verdict(item, None, "llama-server", refusal, causes=[cause])
    assert (outcome.status, outcome.cause, outcome.klass) == ("known", cause.name, "engine-defect")
    other = verdict.verdict(item, None, "llama-server", Refused("HTTP 400: something else"), causes=[cause])
    assert other.status == "drift"
    assert gate.gated(outcome, ["engine-defect"]).kind == "known-gated"
    assert gate.gated(outcome, ["policy"]) is outcome


@pytest.mark.slow
def test_the_as_sent_cause_explains_the_template_on_the_body_as_sent():
    """minijinja renders llama3's JSON-text arguments as the template does on the body as sent:
    the golden's digest of that render is what the engine-level cause matches, on any model."""
    item = golden_of("llama3/tool-result-json-args")
    cause = causes.named(GOLDENS, "minijinja-renders-as-sent")
    from generator import reference
    from generator.config.models import load

    config = load(ROOT / "models.yaml")
    as_sent = reference._render_as_is(reference.load_tokenizer(source_of("llama3").tokenizer_dir),
                                      source_of("llama3").template, item.request, config.date, None)
    outcome = verdict.verdict(item, None, "minijinja", Ids(as_sent.ids), causes=[cause])
    assert (outcome.status, outcome.cause, outcome.klass) == ("known", cause.name, "policy")
    moved = verdict.verdict(item, None, "minijinja", Ids(as_sent.ids[:-1]), causes=[cause])
    assert moved.status == "drift"  # one token off the as-sent render is not the cause


def test_an_entry_naming_a_missing_cause_or_saying_a_reason_too_is_one_line(tmp_path):
    shutil.copytree(GOLDENS / "llama3", tmp_path / "llama3")
    shutil.copytree(GOLDENS / causes.FOLDER, tmp_path / causes.FOLDER)
    path = next(p for p in (tmp_path / "llama3").glob("*.*.json") if '"cause"' in p.read_text())
    data = json.loads(path.read_text())
    stem, engine = path.name.split(".")[:2]
    (tmp_path / causes.FOLDER / f"{data['cause']}.json").unlink()
    with pytest.raises(GoldensError, match="is not a reviewed cause") as error:
        ledger.read(tmp_path, f"llama3/{stem}", engine)
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_regenerate_prints_the_invariants_review_to_paste_and_writes_it_on_the_flag(tmp_path):
    """A team's Llama 3 template drops tool calls: regenerate says what to paste (with the docs
    page's address, not a path in goldens' own repository); --write-invariants writes it, and
    check then passes the findings as reviewed."""
    shutil.copytree(source_of("llama3").tokenizer_dir, tmp_path / "tok")
    (tmp_path / "chat_template.jinja").write_text(LLAMA3_TEMPLATE, encoding="utf-8")
    text = "date: 2026-01-15\nmodels:\n  acme:\n    tokenizer: {dir: tok}\n    template: {file: chat_template.jinja}\n" \
           "    shapes: [plain, tool-result]\n    kwargs: {date_string: \"15 Jan 2026\"}\n    engines: [transformers]\n"
    (tmp_path / "models.yaml").write_text(text, encoding="utf-8")
    run = CliRunner().invoke(main, ["regenerate", "--config", str(tmp_path / "models.yaml"),
                                    "--goldens", str(tmp_path / "goldens")])
    assert run.exit_code == 0, run.output
    found = [case for case in ("acme/tool-result",)
             if invariants.findings_of(golden_file.read(tmp_path / "goldens" / f"{case}.json").extra)]
    if not found:
        pytest.fail("the Llama 3 template was expected to leave a finding on tool-result")
    assert "paste under models.acme in models.yaml" in run.stdout and invariants.docs_url() in run.stdout
    assert invariants.docs_url().startswith("https://github.com/")
    check = CliRunner().invoke(main, ["check", "--config", str(tmp_path / "models.yaml"),
                                      "--goldens", str(tmp_path / "goldens")])
    assert check.exit_code == 1 and invariants.docs_url() in check.output
    written = CliRunner().invoke(main, ["regenerate", "--config", str(tmp_path / "models.yaml"),
                                        "--goldens", str(tmp_path / "goldens"), "--write-invariants"])
    assert written.exit_code == 0 and "wrote the invariants: review of acme" in written.stdout
    reviewed = yaml.safe_load((tmp_path / "models.yaml").read_text())["models"]["acme"]["invariants"]
    assert reviewed and all(entry["cases"] == ["tool-result"] for entry in reviewed)
    again = CliRunner().invoke(main, ["check", "--config", str(tmp_path / "models.yaml"),
                                      "--goldens", str(tmp_path / "goldens")])
    assert again.exit_code == 0, again.output


def test_the_docs_address_names_this_release_wherever_the_code_runs():
    """The same address from the installed package and from the venv at the pins, where goldens
    runs from its path with no metadata (it said .../blob/main/... there)."""
    import tomllib

    import generator

    release = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert generator.__version__ == release
    assert invariants.docs_url().endswith(f"/blob/v{release}/docs/invariants.md")


def test_write_review_keeps_comments_and_appends_to_an_existing_list(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text("# mine\nmodels:\n  a:          # keep\n    tokenizer: x\n    engines: [transformers]\n"
                    "  b:\n    invariants:\n      - finding: f\n        reason: r\n    engines:\n      - transformers\n",
                    encoding="utf-8")
    proposed = {"a": [{"finding": "tool call [x] dropped", "cases": ["t"], "reason": "why"}],
                "b": [{"finding": "g", "cases": ["u"], "reason": "why"}]}
    assert invariants.write_review(path, proposed) == ["a", "b"]
    text = path.read_text()
    assert "# mine" in text and "# keep" in text
    data = yaml.safe_load(text)["models"]
    assert data["a"]["invariants"] == proposed["a"] and data["a"]["engines"] == ["transformers"]
    assert [e["finding"] for e in data["b"]["invariants"]] == ["f", "g"] and data["b"]["engines"] == ["transformers"]


@pytest.mark.slow
def test_a_bump_review_says_the_template_bos_and_their_effect_on_ids(tmp_path):
    """Llama 3 tokenizer files swapped for Llama 3.1's: ids that do not move are not the whole
    story. The diff says the template's text change, add_bos_token and the post-processor that
    adds a BOS, and that a client re-encoding the prompt now sends one more token."""
    import subprocess

    new_dir = source_of("llama3").tokenizer_dir
    repo = tmp_path / "team"
    (repo / "tok").mkdir(parents=True)
    tokenizer = json.loads((new_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer["post_processor"] = None  # Llama 3's files: nothing added on encode
    (repo / "tok" / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    config = json.loads((new_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    (repo / "tok" / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": False}), encoding="utf-8")
    (repo / "tok" / "chat_template.jinja").write_text(LLAMA3_TEMPLATE, encoding="utf-8")
    (repo / "models.yaml").write_text("date: 2026-01-15\nmodels:\n  acme:\n    tokenizer: {dir: tok}\n"
                                      "    shapes: [plain, multi-turn]\n    engines: [transformers]\n", encoding="utf-8")

    def git(*args):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                       env={**__import__("os").environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e.invalid"})

    def regenerate():
        from generator import reference

        reference.load_tokenizer.cache_clear()  # the folder's files change in place: a new process would reload
        result = CliRunner().invoke(main, ["regenerate", "--config", str(repo / "models.yaml"),
                                           "--goldens", str(repo / "goldens")])
        assert result.exit_code == 0, result.output

    regenerate()
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "llama 3")
    shutil.copy(new_dir / "tokenizer.json", repo / "tok" / "tokenizer.json")
    shutil.copy(new_dir / "tokenizer_config.json", repo / "tok" / "tokenizer_config.json")
    (repo / "tok" / "chat_template.jinja").write_text(LLAMA3_TEMPLATE.replace("| trim", "| trim | replace('x', 'x')"),
                                                      encoding="utf-8")
    regenerate()
    import os

    cwd = os.getcwd()
    os.chdir(repo)
    try:
        result = CliRunner().invoke(main, ["diff", "--goldens", "goldens"])
        as_json = json.loads(CliRunner().invoke(main, ["diff", "--goldens", "goldens", "--json"]).stdout)
    finally:
        os.chdir(cwd)
    out = result.stdout
    assert "acme: its sources changed (template_sha256" in out, out
    assert "the template's text (" in out and "+{% set loop_messages" in out or "replace('x', 'x')" in out, out
    assert "add_bos_token: False → True" in out, out
    assert "post_processor: 'none' → '<|begin_of_text|> $A'" in out, out
    assert list(as_json["sources"]) == ["acme"] and out.startswith("\n".join(as_json["sources"]["acme"]))
    # the second BOS a client re-encoding the prompt now sends, said as such, in every golden it moved
    rendered = sum(json.loads(p.read_text())["outcome"] == "ok" for p in (repo / "goldens" / "acme").glob("*.json"))
    assert (f"effect on ids a client re-encodes (encode(decode(ids)) with the defaults), in {rendered} of {rendered} "
            "goldens: was the same ids; now 1 id more: re-encoding inserts '<|begin_of_text|>' at id 1, after "
            "'<|begin_of_text|>' (a second BOS") in out, out


def test_the_atlas_asks_only_new_cases_and_keeps_what_it_found_on_the_others():
    from generator.replay.releases import atlas

    old = {"from": "1", "to": "3", "searched": {"m/a": "da", "m/b": "db"}, "asked": ["1", "3"],
           "change_points": [{"label": "2", "groups": [{"cases": ["m/a", "m/b"]}], "cases": ["m/a", "m/b"]}],
           "unavailable": {}, "explanations": {"2": {"stage": "tokenizer", "line": "why", "upstream": []}}}
    now = {"m/a": "da", "m/b": "db2", "m/c": "dc"}  # b's request changed, c is new
    assert atlas.incremental(old, "1", "3", now, exhaustive=False) == ["m/b", "m/c"]
    assert atlas.incremental(old, "1", "4", now, exhaustive=False) is None  # another range: all of it
    assert atlas.incremental({**old, "searched": {}}, "1", "3", now, exhaustive=False) is None
    new = {"releases": ["1", "2", "3"], "asked": ["1", "2", "3"], "unavailable": {}, "_cases": ["m/b", "m/c"],
           "change_points": [{"label": "3", "groups": [{"cases": ["m/c"]}], "cases": ["m/c"]}],
           "explanations": {"3": {"stage": "", "line": "", "upstream": []}}}
    data = atlas.merged(old, new, now)
    assert [(c["label"], c["cases"]) for c in data["change_points"]] == [("2", ["m/a"]), ("3", ["m/c"])]
    assert data["explanations"]["2"]["line"] == "why" and data["asked"] == ["1", "2", "3"]


@pytest.mark.slow
def test_check_and_pytest_goldens_judge_the_same_tree_alike(tmp_path):
    """A team's Llama 3 model on transformers and minijinja: an unreviewed invariant finding
    fails both, goldens' engine-level cause passes minijinja's as-sent render on both (known,
    policy), and once the review is written both are green."""
    import os
    import subprocess
    import sys

    shutil.copytree(source_of("llama3").tokenizer_dir, tmp_path / "tok")
    (tmp_path / "chat_template.jinja").write_text(source_of("llama3").template, encoding="utf-8")
    (tmp_path / "models.yaml").write_text(
        "date: 2026-01-15\nmodels:\n  acme:\n    tokenizer: {dir: tok}\n    template: {file: chat_template.jinja}\n"
        "    shapes: [plain, tool-result-json-args]\n    dialects: [call-with-text]\n"
        "    kwargs: {date_string: \"15 Jan 2026\"}\n    engines: [transformers, minijinja]\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, capture_output=True, text=True,
                              timeout=900, env=env)

    assert run("generator.cli", "regenerate").returncode == 0
    check = run("generator.cli", "check")
    suite = run("pytest", "--goldens", "-p", "no:cacheprovider", "-rA", "-q")
    drifted = sorted(line.split(" [")[0].split(" ", 1)[1] for line in check.stdout.splitlines()
                     if line.startswith("DRIFT "))
    failed = sorted(line.split(" ")[1] for line in suite.stdout.splitlines() if line.startswith("FAILED "))
    assert check.returncode == 1 and suite.returncode == 1, (check.stdout, suite.stdout)
    assert drifted and all(case.startswith("acme/") for case in drifted)
    assert failed == ["models.yaml::acme[invariants]"], suite.stdout[-3000:]
    assert "known divergences by class: " in check.stdout and "policy" in check.stdout  # minijinja, as sent
    assert run("generator.cli", "regenerate", "--write-invariants").returncode == 0
    again, suite = run("generator.cli", "check"), run("pytest", "--goldens", "-p", "no:cacheprovider", "-q")
    assert again.returncode == 0 and suite.returncode == 0, (again.stdout, suite.stdout[-2000:])


def test_a_bump_round_trip_is_one_line_per_effect_and_a_refusal_is_said():
    """Goldens whose re-encoding moved alike are one line, whatever their lengths; a case the new
    template refuses has no ids to re-encode; an effect that stays is said as still there."""
    from types import SimpleNamespace

    from generator.goldens import bump

    bos = "<|begin_of_text|>"

    def golden(case, defaults, outcome="ok"):
        return SimpleNamespace(case=case, outcome=outcome, extra={"roundtrip": {"defaults": defaults}})

    def second_bos(n):
        return {"at": 1, "golden": "<|start_header_id|>system", "round_trip": f"{bos}<|start_header_id|>sys",
                "shared": bos, "tokens": f"{n} -> {n + 1}"}

    pairs = [(golden("m/a", "same"), golden("m/a", second_bos(27))),
             (golden("m/b", "same"), golden("m/b", second_bos(40))),
             (golden("m/c", "same"), golden("m/c", None, outcome="error")),
             (golden("m/d", second_bos(10)), golden("m/d", second_bos(12)))]
    lines = bump._round_trip_lines(pairs, bos)
    assert len(lines) == 3, lines
    assert lines[0].endswith(f"in 2 of 4 goldens: was the same ids; now 1 id more: re-encoding inserts {bos!r} at id "
                             f"1, after {bos!r} (a second BOS: the template writes one and encoding with the defaults "
                             "adds another); e.g. m/a: same before, 27 -> 28 now")
    assert "in 1 of 4 goldens: was the same ids; now refused by the template (no ids); e.g. m/c" in lines[1]
    assert "in 1 of 4 goldens: still 1 id more: re-encoding inserts" in lines[2]


def test_a_defect_whose_cases_the_atlas_never_asked_has_no_first_release(tmp_path):
    """A report must not say every release answers the same way on cases the atlas never asked
    (a model the matrix gained after the atlas ran): an atlas of the same range that searched
    every model but the case's says "not known", the real one finds the change point."""
    trailing = causes.named(GOLDENS, "llama-server-refuses-trailing-tool-call")
    atlas = json.loads((ROOT / "docs" / "atlas" / "llama-server.json").read_text(encoding="utf-8"))
    case = sorted(trailing.cases)[0]
    model = case.partition("/")[0]
    narrowed = {**atlas, "models": [m for m in atlas["models"] if m != model], "change_points": []}
    if "searched" in narrowed:
        narrowed["searched"] = {c: d for c, d in narrowed["searched"].items() if not c.startswith(model + "/")}
    (tmp_path / "llama-server.json").write_text(json.dumps(narrowed), encoding="utf-8")
    first = defects.first_release(tmp_path, "llama-server", trailing, [case])
    assert first.startswith("not known: ") and "never asked" in first
    assert not defects.first_release(ROOT / "docs" / "atlas", "llama-server", trailing, [case]).startswith("not known")
