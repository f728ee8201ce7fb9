"""The CI workflow file is valid against GitHub's workflow schema.

check-jsonschema ships a vendored copy of the schema (`vendor.github-workflows`), so this runs
offline; a workflow that GitHub would reject fails here, before it reaches CI.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "goldens.yml"


def validate(path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, timeout=120,
    )


def test_the_workflow_matches_githubs_schema():
    result = validate(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_job_without_runs_on_is_rejected(tmp_path):
    broken = tmp_path / "goldens.yml"
    broken.write_text(WORKFLOW.read_text(encoding="utf-8").replace("runs-on:", "runs_on:"), encoding="utf-8")
    result = validate(broken)
    assert result.returncode == 1
    assert "'runs-on' is a required property" in result.stdout
