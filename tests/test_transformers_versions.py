"""Another Transformers release, in its own venv, rendering through the project's own reference.

Transformers 4.57.6 is installed once per machine into ~/.cache/goldens/transformers-4.57.6; the
worker process imports generator.reference there, so the only thing that differs from the
goldens is the release. Its verdict on the whole built-in matrix is a real one (exit 0 or 1):
every tokenizer directory this project builds must load in 4.x too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT, source_of, tier

from generator.cli import main
from generator.config.cases import matrix
from generator.goldens import golden_file
from generator.engines.transformers.venv import TransformersWorker

RELEASE = "4.57.6"


@pytest.fixture(scope="module")
@tier(pytest.mark.integration)  # a transformers@V worker in its own venv
def worker():
    worker = TransformersWorker(RELEASE).start()
    yield worker
    worker.stop()


@pytest.mark.integration
def test_worker_runs_the_release_it_was_asked_for(worker):
    assert worker.versions["transformers"] == RELEASE
    assert worker.versions["tokenizers"].startswith("0.22.")  # what 4.57.6 pulls, not the project's 0.23


@pytest.mark.integration
@pytest.mark.parametrize("model", ["phi3.5", "llama3", "mistral-nemo", "gemma4", "command-r"])
def test_built_tokenizer_directories_load_in_transformers_4(worker, model):
    """GGUF, llama-models and tekken directories name PreTrainedTokenizerFast, which 4.x knows
    (TokenizersBackend, the 5.x name, made 4.57 fail to load them at all)."""
    case = next(c for c in matrix(CONFIG, [model]) if c.shape == "plain")
    source = source_of(model)
    answer = worker.render(source.tokenizer_dir, source.template, case.request, CONFIG.date.isoformat())
    assert "fatal" not in answer, answer
    assert answer["ids"] == golden_file.read(golden_file.golden_path(GOLDENS, case.id)).ids


@pytest.mark.integration
def test_whole_matrix_through_transformers_4_57_is_a_verdict(tmp_path):
    """`goldens check --engine transformers@4.57.6` over every model: exit 0 or 1, never 2."""
    junit = tmp_path / "goldens.xml"
    result = CliRunner().invoke(main, [
        "check", "--config", str(ROOT / "models.yaml"), "--goldens", str(GOLDENS),
        "--engine", f"transformers@{RELEASE}", "--junit", str(junit)])
    assert result.exit_code in (0, 1), result.output
    cases = len(matrix(CONFIG))
    assert f"{cases} checked" in result.stdout and ", 0 error" in result.stdout, result.stdout
    assert f"transformers@{RELEASE}: {RELEASE}" in result.stdout
    (suite,) = ET.parse(junit).getroot()
    assert suite.get("name") == f"goldens.transformers@{RELEASE}" and suite.get("tests") == str(cases)


@pytest.mark.integration
def test_prefix_puts_two_releases_side_by_side():
    result = CliRunner().invoke(main, ["prefix", "--config", str(ROOT / "models.yaml"), "--model", "qwen3",
                                       "--engine", f"transformers@{RELEASE}", "--engine", "transformers"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert f"== transformers@{RELEASE}" in lines and "== transformers" in lines
    at = next(i for i, line in enumerate(lines) if line.startswith("conversation "))
    assert lines[at].split() == ["conversation", f"transformers@{RELEASE}", "transformers"]
    row = next(line for line in lines[at:] if line.startswith("qwen3/multi-turn [thinking-off]"))
    assert row.count("token 25 (2 -> 4 messages)") == 2  # the declared tail, in both releases


@pytest.mark.slow
def test_a_tokenizer_the_release_cannot_load_is_answered_not_a_crash(tmp_path):
    """The worker module, run by this venv's python (it imports only the standard library and
    generator.reference): a tokenizer directory whose tokenizer.json is not JSON gets a `fatal`
    answer naming it, and the worker goes on to answer the next job."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{not json", encoding="utf-8")
    (broken / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}', encoding="utf-8")
    source = source_of("qwen3")
    case = matrix(CONFIG, ["qwen3"])[0]
    request = case.request
    jobs = [{"tokenizer_dir": str(broken), "template": source.template, "request": request, "date": "2026-01-15"},
            {"tokenizer_dir": str(source.tokenizer_dir), "template": source.template, "request": request,
             "date": "2026-01-15"}]
    done = subprocess.run([sys.executable, "-m", "generator.engines.transformers.worker"],
                          input="".join(json.dumps(job) + "\n" for job in jobs), capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    versions, fatal, answer = (json.loads(line) for line in done.stdout.splitlines())
    assert set(versions) == {"transformers", "tokenizers", "jinja2"}
    assert fatal["fatal"].startswith(f"{broken}: cannot load the tokenizer (JSONDecodeError: "), fatal
    assert answer["ids"] == golden_file.read(golden_file.golden_path(GOLDENS, case.id)).ids


@pytest.mark.integration
def test_an_image_case_goes_through_the_releases_processor(worker):
    """A media case is rendered by the release's own processor, as the reference renders it: on
    4.57.6 that processor skips OpenAI `image_url` parts (transformers PR #43786 came in 5.2.0),
    so the prompt has no image; the same image as a `{type: image}` part is expanded."""
    case = next(c for c in matrix(CONFIG, ["gemma3"]) if c.shape == "image-expanded")
    source = source_of("gemma3")
    golden = golden_file.read(golden_file.golden_path(GOLDENS, case.id))
    assert "<start_of_image>" in golden.pieces
    answer = worker.render(source.tokenizer_dir, source.template, case.request, CONFIG.date.isoformat(),
                           source.processor_dir)
    assert "fatal" not in answer and answer["error"] is None, answer
    assert "<start_of_image>" not in answer["pieces"] and len(answer["ids"]) < len(golden.ids)
    native = json.loads(json.dumps(case.request))
    (part,) = [p for m in native["messages"] for p in m["content"] if p["type"] == "image_url"]
    part.update(type="image", url=part.pop("image_url")["url"])
    answer = worker.render(source.tokenizer_dir, source.template, native, CONFIG.date.isoformat(),
                           source.processor_dir)
    assert answer["ids"] == golden.ids, answer.get("error") or answer.get("fatal")


@pytest.mark.integration
def test_gemma3_images_match_on_a_release_whose_processor_reads_image_url():
    """5.25.0 (after PR #43786) expands the image_url parts as the reference does: gemma3's
    image cases match their goldens. Rendered without the processor they had drifted (12 vs 271)."""
    result = CliRunner().invoke(main, [
        "check", "--config", str(ROOT / "models.yaml"), "--goldens", str(GOLDENS),
        "--engine", "transformers@5.25.0", "--model", "gemma3"])
    assert result.exit_code == 0, result.output
    assert ", 0 drift, 0 error" in result.stdout, result.stdout
