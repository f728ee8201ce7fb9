"""`make sources` (generator/sources/warm.py): what the fast tier needs, downloaded once."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def test_a_light_run_on_an_empty_cache_is_one_line_and_exit_2(tmp_path):
    """It downloads, so a light run refuses it at the first download, in one line, and writes
    nothing but the cache it was given."""
    env = {**os.environ, "GOLDENS_LIGHT": "1", "GOLDENS_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "generator.sources.warm", str(ROOT / "models.yaml")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("goldens: error:")]
    assert len(errors) == 1 and "downloading" in errors[0] and "refused in a light run" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
