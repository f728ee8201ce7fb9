"""Template coverage: the compiled template's lines traced during the reference's own renders,
mapped back to template lines (generator/coverage/trace.py, `goldens coverage`)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from generator.cli import main

# Line 5 (the `documents` branch) is never reached by a matrix of `plain` alone; line 6 is.
TEMPLATE = """{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if documents %}
{{- 'DOCUMENTS: ' + documents | length | string }}
{%- endif %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def workspace(tmp_path, shapes: str, template: str = TEMPLATE) -> object:
    (tmp_path / "small.jinja").write_text(template, encoding="utf-8")
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n  small:\n    tokenizer: {pack: \"npm:qwen3\"}\n    template: {file: small.jinja}\n"
        f"    shapes: {shapes}\n    engines: [transformers]\n", encoding="utf-8")
    return config


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_coverage_names_the_unexecuted_branch_with_its_line_and_text(tmp_path):
    config = workspace(tmp_path, "{only: [plain]}")
    result = run("coverage", "--config", config, "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)["models"]["small"]
    spans = record["never_executed"]
    assert [s["lines"] for s in spans] == [[5, 5]], spans
    assert "DOCUMENTS" in spans[0]["text"] and not spans[0]["partly"]
    assert record["executed"] < record["executable"]
    again = run("coverage", "--config", config, "--json")
    assert again.stdout == result.stdout  # deterministic

    report = tmp_path / "coverage.md"
    text = run("coverage", "--config", config, "--report", report)
    assert text.exit_code == 0
    assert "small:" in text.stdout and "line 5:" in text.stdout
    assert "| small |" in report.read_text(encoding="utf-8")


def test_a_shape_reaching_the_branch_executes_every_line(tmp_path):
    config = workspace(tmp_path, "{only: [plain, documents]}")
    record = json.loads(run("coverage", "--config", config, "--json").stdout)["models"]["small"]
    assert record["never_executed"] == [] and record["percent"] == 100.0


def test_unknown_model_is_one_error_line(tmp_path):
    config = workspace(tmp_path, "{only: [plain]}")
    result = run("coverage", "--config", config, "--model", "nope")
    assert result.exit_code == 2
    assert result.stderr.startswith("goldens: error: ") and len(result.stderr.splitlines()) == 1


# A namespace assignment and a macro called with every argument: Jinja compiles a raise behind
# the `set ns.x` and a "was not provided" default for each macro parameter, which no request
# can reach. A matrix that reaches every branch of the template's own code is at 100%.
GUARDED = """{%- macro turn(role, text) -%}
{{- '<|im_start|>' + role + '\\n' + text + '<|im_end|>\\n' }}
{%- endmacro -%}
{%- set ns = namespace(users=0) -%}
{%- for message in messages %}
{%- if message.role == 'user' %}{%- set ns.users = ns.users + 1 %}{%- endif %}
{{- turn(message.role, message.content) }}
{%- endfor %}
{{- ns.users | string }}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def test_jinja_guards_no_request_can_reach_are_not_counted(tmp_path):
    from generator.coverage import trace

    code = trace.compiled(GUARDED)
    assert code.guards == 3  # the raise behind `set ns.users`, the defaults of `role` and `text`
    config = workspace(tmp_path, "{only: [plain]}", GUARDED)
    record = json.loads(run("coverage", "--config", config, "--json").stdout)["models"]["small"]
    assert record["never_executed"] == [] and record["percent"] == 100.0
    assert record["executable"] == len(code.lines)


def test_check_carries_coverage_as_one_folded_section_of_its_report(tmp_path):
    """`check --coverage`: the Markdown report (and the results file a shard merge reads) holds the
    checked models' coverage; the unreached `documents` branch is named with its text."""
    config = workspace(tmp_path, "{only: [plain]}")
    goldens = tmp_path / "goldens"
    assert run("regenerate", "--config", config, "--goldens", goldens).exit_code == 0
    report, results = tmp_path / "report.md", tmp_path / "results.json"
    checked = run("check", "--config", config, "--goldens", goldens, "--coverage", "--report", report,
                  "--results", results)
    assert checked.exit_code == 0, checked.output
    page = report.read_text(encoding="utf-8")
    title = "template coverage: "
    assert page.count(f"<details><summary>{title}") == 1
    section = page[page.index(f"<details><summary>{title}"):]
    assert "| small |" in section and "small, line 5:" in section and "DOCUMENTS" in section
    assert json.loads(results.read_text(encoding="utf-8"))["coverage"]["small"]["never_executed"][0]["lines"] == [5, 5]
    merged = tmp_path / "merged.md"
    assert run("report", "merge", results, "--goldens", goldens, "--report", merged).exit_code == 0
    assert merged.read_text(encoding="utf-8") == page
    plain = tmp_path / "plain.md"
    assert run("check", "--config", config, "--goldens", goldens, "--report", plain).exit_code == 0
    assert title not in plain.read_text(encoding="utf-8")
