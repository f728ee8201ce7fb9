"""Bad input in models.yaml (and on the command line) through the real CLI.

Every case runs in-process through click's CliRunner (fast), and a representative few also run
the installed console script in a subprocess, where a traceback would really reach the terminal.

Every mistake must end the same way: exit code 2, exactly one line on stderr naming the file and
the key path, no traceback, and nothing written. A typo in a matrix that gates CI must never turn
into a silently smaller matrix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import CONFIG

from generator.cli import main
from generator.config import models
from generator.config.cases import model_cases, parse_cases_of
from generator.errors import GoldensError

ROOT = Path(__file__).resolve().parents[1]
CONFIG_NAME = "matrix.yaml"  # not the default name, so the error must really name this file


def goldens_command() -> list[str]:
    script = Path(sys.executable).parent / "goldens"
    return [str(script)] if script.exists() else [sys.executable, "-m", "generator.cli"]


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(goldens_command() + args, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def run_in_process(args: list[str]) -> subprocess.CompletedProcess:
    """CliRunner, reported like a subprocess; any exception but SystemExit would be a traceback."""
    result = CliRunner().invoke(main, args)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "\nTraceback (in process): " + repr(result.exception)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, stderr)


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("goldens: error: "), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


QWEN = '{pack: "npm:qwen3"}'
SHA = "0123456789abcdef" * 4

# id -> (models.yaml text, what the one line must contain besides the file name)
BAD_CONFIGS = {
    "yaml-syntax": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    shapes: [plain, tools\n",
        ["YAML error", "line"],
    ),
    "yaml-tab-indent": ("models:\n\tm: {}\n", ["YAML error", "line 2"]),
    "empty-file": ("", ["top level", "expected a mapping"]),
    "unknown-top-key": (f"colour: red\nmodels:\n  m:\n    tokenizer: {QWEN}\n", ["colour", "unknown key"]),
    "missing-models": ("date: 2026-01-15\n", ["models", "missing required key"]),
    "no-models": ("models: {}\n", ["models", "at least one model"]),
    "unknown-model-key": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    shape: [plain]\n", ["models.m.shape", "unknown key"],
    ),
    "bad-model-name": (f"models:\n  My_Model:\n    tokenizer: {QWEN}\n", ["models.My_Model"]),
    "bad-tool-parser": (f"models:\n  m:\n    tokenizer: {QWEN}\n    tool_parser: --enable-x\n",
                        ["models.m.tool_parser", "vLLM tool-call parser name"]),
    "missing-tokenizer": ("models:\n  m:\n    shapes: [plain]\n", ["models.m.tokenizer", "missing required key"]),
    "two-tokenizer-kinds": (
        'models:\n  m:\n    tokenizer: {pack: "npm:qwen3", dir: ./tok}\n',
        ["models.m.tokenizer", "exactly one of pack, hf, gguf, dir"],
    ),
    "no-tokenizer-kind": ("models:\n  m:\n    tokenizer: {}\n", ["models.m.tokenizer", "exactly one of"]),
    "unknown-tokenizer-key": (
        'models:\n  m:\n    tokenizer: {pack: "npm:qwen3", branch: main}\n', ["models.m.tokenizer.branch", "unknown key"],
    ),
    "hf-without-revision": (
        "models:\n  m:\n    tokenizer: {hf: Qwen/Qwen3-0.6B}\n", ["models.m.tokenizer.revision", "revision"],
    ),
    "revision-on-pack": (
        'models:\n  m:\n    tokenizer: {pack: "npm:qwen3", revision: main}\n', ["models.m.tokenizer.revision"],
    ),
    "empty-tokenizer-value": ('models:\n  m:\n    tokenizer: {dir: ""}\n', ["models.m.tokenizer.dir"]),
    "two-template-kinds": (
        f'models:\n  m:\n    tokenizer: {QWEN}\n    template: {{file: a.jinja, inline: "x"}}\n',
        ["models.m.template", "at most one of"],
    ),
    "unknown-shape": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    shapes: [plain, tool]\n",
        ["models.m.shapes[1]", "unknown shape 'tool'"],
    ),
    "unknown-shape-in-all-except": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    shapes: {{all_except: [images]}}\n",
        ["models.m.shapes.all_except[0]", "unknown shape 'images'"],
    ),
    "shapes-not-a-list": (f"models:\n  m:\n    tokenizer: {QWEN}\n    shapes: plain\n", ["models.m.shapes"]),
    "unknown-engine": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    engines: [transformers, tgi]\n",
        ["models.m.engines[1]", "unknown engine 'tgi'"],
    ),
    "bad-variant-name": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    variants:\n      Thinking_Off: {{enable_thinking: false}}\n",
        ["models.m.variants.Thinking_Off"],
    ),
    "variant-not-a-mapping": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    variants:\n      thinking-off: false\n",
        ["models.m.variants.thinking-off", "expected a mapping"],
    ),
    "bad-pin-format": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    pins: {{template_sha256: abc123}}\n",
        ["models.m.pins.template_sha256", "64 lowercase hex"],
    ),
    "uppercase-pin": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    pins: {{tokenizer_sha256: {SHA.upper()}}}\n",
        ["models.m.pins.tokenizer_sha256", "64 lowercase hex"],
    ),
    "unknown-pin": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    pins: {{vocab_sha256: {SHA}}}\n",
        ["models.m.pins.vocab_sha256", "unknown key"],
    ),
    "bad-date": (f"date: soon\nmodels:\n  m:\n    tokenizer: {QWEN}\n", ["date", "expected a date"]),
    "image-shape-without-processor": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    shapes: [plain, image-expanded]\n",
        ["models.m.shapes", "'image-expanded'", "needs `processor:`"],
    ),
    "processor-without-origin": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    processor: {{processor_config: {{}}, preprocessor_config: {{}}}}\n",
        ["models.m.processor.origin", "missing required key"],
    ),
    "processor-blank-origin": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    processor: {{origin: ' ', processor_config: {{}}, "
        f"preprocessor_config: {{}}}}\n",
        ["models.m.processor.origin", "say where"],
    ),
    "processor-config-not-a-mapping": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    processor: {{origin: x, processor_config: [], "
        f"preprocessor_config: {{}}}}\n",
        ["models.m.processor.processor_config", "expected a mapping"],
    ),
    "tokenizer-config-on-a-directory": (
        "models:\n  m:\n    tokenizer: {dir: tok, tokenizer_config: {add_bos_token: false}}\n",
        ["models.m.tokenizer.tokenizer_config", "only a tokenizer built from a GGUF"],
    ),
    "tokenizer-config-not-a-scalar": (
        "models:\n  m:\n    tokenizer: {pack: 'llama.cpp:phi-3', tokenizer_config: {add_bos_token: [no]}}\n",
        ["models.m.tokenizer.tokenizer_config.add_bos_token", "scalar value"],
    ),
    "unknown-pinned-engine": (
        f"engines:\n  tgi: {{version: 3.3.0}}\nmodels:\n  m:\n    tokenizer: {QWEN}\n",
        ["engines.tgi", "unknown key"],
    ),
    "unknown-engine-pin-key": (
        f"engines:\n  llama-server: {{version: 11434}}\nmodels:\n  m:\n    tokenizer: {QWEN}\n",
        ["engines.llama-server.version", "unknown key"],
    ),
    "bad-llama-build": (
        f"engines:\n  llama-server: {{build: latest}}\nmodels:\n  m:\n    tokenizer: {QWEN}\n",
        ["engines.llama-server.build", "a llama.cpp build is a number"],
    ),
    "unquoted-float-version": (
        f"engines:\n  vllm: {{version: 0.32}}\nmodels:\n  m:\n    tokenizer: {QWEN}\n",
        ["engines.vllm.version", "quoted release"],
    ),
    "requests-glob-matches-nothing": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    shapes: {{requests: [requests/*.json]}}\n",
        ["models.m.shapes.requests[0]", "matches no file"],
    ),
    "only-and-all-except": (
        f"models:\n  m:\n    tokenizer: {QWEN}\n    shapes: {{only: [plain], all_except: [tools]}}\n",
        ["models.m.shapes", "at most one of all_except, only"],
    ),
}


SUBPROCESS_CASES = {"yaml-syntax", "unknown-model-key", "two-tokenizer-kinds", "unknown-shape", "bad-pin-format"}


@pytest.mark.parametrize(
    "case, in_process",
    [(case, True) for case in sorted(BAD_CONFIGS)] + [(case, False) for case in sorted(SUBPROCESS_CASES)],
    ids=[f"{case}-cli" for case in sorted(BAD_CONFIGS)] + [f"{case}-subprocess" for case in sorted(SUBPROCESS_CASES)],
)
def test_bad_config_is_one_line_exit_2_and_writes_nothing(case, in_process, tmp_path):
    text, needles = BAD_CONFIGS[case]
    config = tmp_path / CONFIG_NAME
    config.write_text(text, encoding="utf-8")
    before = snapshot(tmp_path)
    args = ["regenerate", "--config", str(config), "--out", str(tmp_path / "out")]
    result = run_in_process(args) if in_process else run(args, cwd=tmp_path)
    assert_one_line_error(result, CONFIG_NAME, *needles)
    assert not (tmp_path / "out").exists()
    assert snapshot(tmp_path) == before  # models.yaml itself untouched, no stray files


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_fails_the_same_in_load(case, tmp_path):
    """The importable loader raises the same one-line GoldensError the CLI prints."""
    text, needles = BAD_CONFIGS[case]
    config = tmp_path / CONFIG_NAME
    config.write_text(text, encoding="utf-8")
    with pytest.raises(GoldensError) as raised:
        models.load(config)
    message = str(raised.value)
    assert "\n" not in message
    assert CONFIG_NAME in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("command", ["models", "render"])
def test_every_command_validates_the_config(command, tmp_path):
    text, needles = BAD_CONFIGS["unknown-shape"]
    config = tmp_path / CONFIG_NAME
    config.write_text(text, encoding="utf-8")
    request = tmp_path / "request.json"
    request.write_text('{"messages": [{"role": "user", "content": "hi"}]}', encoding="utf-8")
    args = [command, "--config", str(config)]
    if command == "render":
        args += ["--model", "m", "--request", str(request)]
    assert_one_line_error(run_in_process(args), CONFIG_NAME, *needles)


def test_unknown_model_name_on_the_command_line(tmp_path):
    config = tmp_path / CONFIG_NAME
    config.write_text(f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    shapes: [plain]\n", encoding="utf-8")
    result = run(["regenerate", "--config", str(config), "--out", str(tmp_path / "out"),
                  "--model", "qwen3", "--model", "qwen4"], cwd=tmp_path)
    assert_one_line_error(result, CONFIG_NAME, "unknown model 'qwen4'", "qwen3")
    assert not (tmp_path / "out").exists()

    request = tmp_path / "request.json"
    request.write_text('{"messages": [{"role": "user", "content": "hi"}]}', encoding="utf-8")
    result = run_in_process(["render", "--config", str(config), "--model", "qwen4", "--request", str(request)])
    assert_one_line_error(result, CONFIG_NAME, "unknown model 'qwen4'")


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nowhere" / "models.yaml"
    result = run(["regenerate", "--config", str(missing), "--out", str(tmp_path / "out")], cwd=tmp_path)
    assert_one_line_error(result, str(missing), "cannot read")
    assert not (tmp_path / "out").exists()


def test_default_config_is_models_yaml_in_the_working_directory(tmp_path):
    result = run(["models"], cwd=tmp_path)
    assert_one_line_error(result, "models.yaml", "cannot read")


def test_bad_request_file_names_the_file(tmp_path):
    config = tmp_path / CONFIG_NAME
    config.write_text(f"models:\n  qwen3:\n    tokenizer: {QWEN}\n", encoding="utf-8")
    request = tmp_path / "body.json"
    request.write_text('{"messages": [{"role": "robot", "content": "hi"}]}', encoding="utf-8")
    result = run_in_process(["render", "--config", str(config), "--model", "qwen3", "--request", str(request)])
    assert_one_line_error(result, "body.json", "messages[0]")


def test_models_command_lists_the_committed_matrix():
    result = run_in_process(["models", "--config", str(ROOT / "models.yaml")])
    assert result.returncode == 0, result.stderr
    assert "engine versions: llama-server b11434, vllm 0.32.0" in result.stdout
    for name in ("qwen3", "gemma3"):  # shapes x variants, polyfilled (docs/capabilities.md), dialect cases
        model = CONFIG.models[name]
        assert f"\n{name}: {len(model_cases(model))} cases, {len(parse_cases_of(model))} parse cases\n" in result.stdout
    qwen3 = CONFIG.models["qwen3"]
    assert qwen3.dialect_cases and len(qwen3.dialect_cases) < len(qwen3.dialects)  # some selected are not kept
    assert (f"  dialects:  {len(qwen3.dialect_cases)} cases kept of {len(qwen3.dialects)} selected "
            "(models.dialects.lock)") in result.stdout
    assert "processor: google/gemma-3-4b-it processor_config.json" in result.stdout
    assert "tokenizer: pack:npm:qwen3" in result.stdout
    assert 'tokenizer: pack:llama.cpp:phi-3 with tokenizer_config {"add_bos_token": false}' in result.stdout
    assert "variants:  default, thinking-off" in result.stdout


def test_image_shapes_go_only_to_models_with_a_processor():
    """`all` gives a text model no image-expanded goldens; a model with a processor gets both."""
    config = models.load(ROOT / "models.yaml")
    assert "image-expanded" not in config.models["qwen3"].shapes
    assert "image-expanded" not in config.models["gemma4"].shapes  # all shapes, but no processor
    gemma3 = config.models["gemma3"]
    assert {"image", "image-expanded", "image-expanded-wide"} <= set(gemma3.shapes)
    assert gemma3.processor.processor_config["image_seq_length"] == 256


def test_an_engine_that_follows_another_runs_its_pin(tmp_path):
    """client-completion is a client of llama-server's server: it runs llama-server's pin and
    cannot be pinned itself (the registry's `follows`); an unversioned engine has no pin."""
    config = models.parse(yaml.safe_load(f"engines:\n  llama-server: {{build: 11000}}\n"
                                         f"models:\n  m:\n    tokenizer: {QWEN}\n"), tmp_path / "m.yaml")
    assert config.pinned("client-completion") == config.pinned("llama-server") == "11000"
    assert config.pinned("minijinja") is None
    with pytest.raises(GoldensError, match=r"engines.client-completion: unknown key \(allowed: llama-server, sglang, transformers, vllm\)"):
        models.parse(yaml.safe_load(f"engines:\n  client-completion: {{build: 11000}}\n"
                                    f"models:\n  m:\n    tokenizer: {QWEN}\n"), tmp_path / "m.yaml")


# request files -> (file name, body, what the one line must contain besides the config and file)
BAD_REQUEST_FILES = {
    "not-json": ("checkout.json", '{"messages": [', ["not valid JSON"]),
    "no-messages": ("checkout.json", '{"model": "x", "temperature": 0}', ["`messages` must be a non-empty list"]),
    "bad-role": ("checkout.json", '{"messages": [{"role": "robot", "content": "hi"}]}', ["messages[0]", "needs a role"]),
    "tools-not-a-list": ("checkout.json", '{"messages": [{"role": "user", "content": "hi"}], "tools": {}}',
                         ["`tools` must be a list"]),
    "stem-is-a-builtin-shape": ("tools.json", '{"messages": [{"role": "user", "content": "hi"}]}',
                                ["shape 'tools' is already defined"]),
    "stem-with-double-dash": ("a--b.json", '{"messages": [{"role": "user", "content": "hi"}]}',
                              ["stem names its shape"]),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUEST_FILES))
def test_bad_request_file_shape_is_one_line_naming_config_key_and_file(case, tmp_path):
    """A team's request body is checked as `goldens render` checks one, before anything runs."""
    name, body, needles = BAD_REQUEST_FILES[case]
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / name).write_text(body, encoding="utf-8")
    config = tmp_path / CONFIG_NAME
    config.write_text(f"models:\n  m:\n    tokenizer: {QWEN}\n"
                      "    shapes: {only: [plain], requests: [requests/*.json]}\n", encoding="utf-8")
    before = snapshot(tmp_path)
    result = run_in_process(["regenerate", "--config", str(config), "--out", str(tmp_path / "out")])
    assert_one_line_error(result, CONFIG_NAME, "models.m.shapes.requests[0]", f"requests/{name}", *needles)
    assert snapshot(tmp_path) == before


def test_request_files_become_shapes_named_by_their_stem(tmp_path):
    """Both files load as shapes after the built-ins chosen; matrix kwargs go over the file's own."""
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / "checkout.json").write_text(json.dumps({
        "model": "ours", "temperature": 0.3,
        "messages": [{"role": "user", "content": "Pay the bill."}],
        "chat_template_kwargs": {"enable_thinking": True, "custom": 1},
    }), encoding="utf-8")
    (tmp_path / "requests" / "refund.json").write_text(
        '{"messages": [{"role": "user", "content": "Refund it."}]}', encoding="utf-8")
    config = tmp_path / CONFIG_NAME
    config.write_text(f"models:\n  m:\n    tokenizer: {QWEN}\n"
                      "    shapes: {only: [plain], requests: [requests/*.json]}\n"
                      "    variants:\n      thinking-off: {enable_thinking: false}\n", encoding="utf-8")
    model = models.load(config).models["m"]
    assert model.shapes == ("plain", "checkout", "refund")
    request = model.request("checkout", {"enable_thinking": False})
    assert request["messages"] == [{"role": "user", "content": "Pay the bill."}]
    assert request["chat_template_kwargs"] == {"enable_thinking": False, "custom": 1}
    assert "temperature" not in request and "model" not in request
    assert request["add_generation_prompt"] is True and request["continue_final_message"] is False
    assert model.request("checkout", {})["chat_template_kwargs"] == {"enable_thinking": True, "custom": 1}


def test_a_tool_parser_starts_vllm_as_a_tool_serving_server():
    """models.yaml's tool_parser becomes vLLM's flags; the built-in matrix names one for every
    model whose template writes tool calls in a syntax vLLM parses."""
    from generator.engines.vllm.engine import tool_args

    from generator.config.models import load

    models = load(ROOT / "models.yaml").models
    assert tool_args(models["qwen3"]) == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert tool_args(models["gemma3"]) == []
    assert {name: m.tool_parser for name, m in models.items() if m.tool_parser} == {
        "qwen3": "hermes", "llama3": "llama3_json", "mistral-nemo": "mistral", "deepseek-v3": "deepseek_v3",
        "gpt-oss": "openai", "gemma4": "gemma4", "kimi-k3": "kimi_k3", "deepseek-v4": "deepseek_v4",
        "glm-4.7-flash": "glm47", "minimax-m3": "minimax_m3", "qwen3.5-4b": "qwen3_coder"}


def test_tool_parser_names_the_tool_parser_of_the_engine_the_registry_says():
    """`tool_parser:` is one engine's tool-call parser, the one whose entry declares
    takes_tool_parser (vLLM's): that engine's parser unless `parsers:` names another; no other
    engine's parser, and no other kind, comes from it."""
    from generator.config import engine_registry

    takers = [info.name for info in engine_registry.BUILT_IN if info.takes_tool_parser]
    assert takers == ["vllm"]  # models.yaml's meaning (docs/models-yaml.md): vLLM's --tool-call-parser
    config = models.parse(yaml.safe_load(
        f"models:\n  m:\n    tokenizer: {QWEN}\n    tool_parser: hermes\n"
        "    parsers: {sglang: {reasoning: qwen3}}\n"
        "  n:\n    tokenizer: " + QWEN + "\n    tool_parser: hermes\n    parsers: {vllm: {tool: qwen3_xml}}\n"),
        ROOT / "models.yaml")
    m, n = config.models["m"], config.models["n"]
    assert m.parser("vllm", "tool") == "hermes" and n.parser("vllm", "tool") == "qwen3_xml"
    others = [info.name for info in engine_registry.BUILT_IN if not info.takes_tool_parser]
    assert others and all(m.parser(name, "tool") is None for name in others)
    assert m.parser("vllm", "reasoning") is None and m.parser("sglang", "reasoning") == "qwen3"
