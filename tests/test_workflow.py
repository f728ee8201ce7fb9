"""The CI workflows are valid against GitHub's workflow schema, and say what they promise.

check-jsonschema ships a vendored copy of the schema (`vendor.github-workflows`), so this runs
offline; a workflow that GitHub would reject fails here, before it reaches CI. The schema does
not know a reusable workflow's inputs, nor goldens' options: those are checked here too.
"""

from __future__ import annotations

import re
import subprocess
import sys

import click
import pytest
import yaml
from conftest import ROOT

from generator.cli import main

WORKFLOW = ROOT / ".github" / "workflows" / "goldens.yml"
REUSABLE = ROOT / ".github" / "workflows" / "goldens-reusable.yml"


def validate(*paths) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
         *map(str, paths)],
        capture_output=True, text=True, timeout=120,
    )


def load(path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def test_the_workflows_match_githubs_schema():
    result = validate(WORKFLOW, REUSABLE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_job_without_runs_on_is_rejected(tmp_path):
    broken = tmp_path / "goldens.yml"
    broken.write_text(REUSABLE.read_text(encoding="utf-8").replace("runs-on:", "runs_on:"), encoding="utf-8")
    result = validate(broken)
    assert result.returncode == 1
    assert "'runs-on' is a required property" in result.stdout


def test_this_repository_calls_the_reusable_workflow_with_declared_inputs():
    caller, reusable = load(WORKFLOW), load(REUSABLE)
    inputs = reusable["on"]["workflow_call"]["inputs"]
    (job,) = caller["jobs"].values()
    assert job["uses"] == "./.github/workflows/goldens-reusable.yml"
    assert set(job["with"]) <= set(inputs), set(job["with"]) - set(inputs)
    assert {name for name, spec in inputs.items() if spec.get("required")} <= set(job["with"])


def test_the_reusable_workflow_takes_the_inputs_a_team_needs():
    inputs = load(REUSABLE)["on"]["workflow_call"]["inputs"]
    assert {"config", "engines", "urls", "python-version", "shards", "package"} <= set(inputs)
    assert inputs["shards"]["type"] == "number" and inputs["shards"]["default"] == 1


def _steps(job: dict) -> dict[str, dict]:
    return {step.get("name") or step.get("uses") or step["id"]: step for step in job["steps"]}


def test_shards_run_as_a_matrix_job_and_one_job_merges_them():
    jobs = load(REUSABLE)["jobs"]
    check, report = jobs["check"], jobs["report"]
    assert check["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
    assert check["strategy"]["fail-fast"] is False
    runs = "\n".join(step.get("run", "") for step in check["steps"])
    assert "apt-get install -y -qq npm cmake g++ ccache" in runs  # what llama.cpp builds need
    assert '--shard "$SHARD"' in runs and '--results "$RESULTS"' in runs
    cache = next(s for s in check["steps"] if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "${{ env.GOLDENS_CACHE }}" and "matrix.shard" in cache["with"]["key"]
    upload = next(s for s in check["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "goldens-results-${{ matrix.shard }}" and upload["if"] == "always()"
    assert report["needs"] == ["plan", "check"] and report["if"].startswith("always()")
    merge = "\n".join(step.get("run", "") for step in report["steps"])
    assert re.search(r"goldens report merge .*--junit \S+ --report \S+ --step-summary", merge), merge
    names = _steps(report)
    assert any("gh pr comment" in s.get("run", "") for s in names.values())
    assert any(s.get("uses", "").startswith("mikepenz/action-junit-report@") for s in names.values())


def test_the_plan_job_lists_one_shard_per_runner(tmp_path):
    """The plan step's script, run: 3 shards are [1,2,3]; 0 is refused."""
    plan = load(REUSABLE)["jobs"]["plan"]["steps"][0]["run"]
    out = tmp_path / "output"
    for shards, expected in (("3", "shards=[1,2,3]\n"), ("1", "shards=[1]\n")):
        out.write_text("")
        done = subprocess.run(["bash", "-c", plan], env={"SHARDS": shards, "GITHUB_OUTPUT": str(out), "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert out.read_text() == expected
    done = subprocess.run(["bash", "-c", plan], env={"SHARDS": "0", "GITHUB_OUTPUT": str(out), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "::error title=goldens::shards" in done.stdout


def invocations(path) -> list[tuple[str, set[str]]]:
    """Every `goldens <command>` a run script makes, with the options the script gives it
    (including those it collects in an `args` array first)."""
    found = []
    for job in load(path)["jobs"].values():
        for step in job.get("steps", []):
            script = step.get("run", "")
            match = re.search(r"^\s*goldens (report merge|[a-z]+)", script, re.M)
            if match is None or match.group(1) == "--version":
                continue
            lines = [line for line in script.splitlines() if re.match(r"\s*goldens ", line) or re.search(r"args\+?=\(", line)]
            found.append((match.group(1), set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", "\n".join(lines)))))
    return found


def options(command: str) -> set[str]:
    node: click.Command = main
    for word in command.split():
        node = node.commands[word]
    return {opt for param in node.params for opt in getattr(param, "opts", [])}


@pytest.mark.parametrize("command", ["diff"])
def test_the_workflow_uses_only_options_goldens_has(command):
    calls = [(c, flags) for c, flags in invocations(REUSABLE) if c == command]
    assert calls, f"the workflow never runs goldens {command}"
    for name, flags in calls:
        assert flags <= options(name), flags - options(name)


@pytest.mark.parametrize("command", ["check", "report merge"])
def test_the_workflow_uses_only_options_goldens_has_sharded(command):
    test_the_workflow_uses_only_options_goldens_has(command)
