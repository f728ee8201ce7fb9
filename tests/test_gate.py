"""The gate tells the truth (issue 10): every reproduction of a gate that passed on nothing, called
a crash drift, or destroyed a user's file, through the real CLI.

Runs use the transformers engine (no server) on copies of the committed goldens in tmp dirs;
servers are tests/test_faults.py's and tests/test_serving.py's business.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import CONFIG, GOLDENS, ROOT

from generator import files
from generator.cli import main
from generator.config import models
from generator.config.cases import model_cases
from generator.engines import Ids, Refused
from generator.engines.transformers.engine import TransformersEngine
from generator.goldens import golden_file
from generator.replay.judging import judge, ledger, verdict
from generator.sources.source import resolve

QWEN = '{pack: "npm:qwen3"}'


def invoke(*args, env=None, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env, input=input)


def one_line(result, *needles: str, prefix: str = "goldens: error: ") -> str:
    """Exit 2, exactly one line on stderr, no traceback, and the line says what it must."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def config(tmp_path: Path, body: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path



def check(where: Path, *args, config_path: Path | None = None):
    return invoke("check", "--config", config_path or where / "models.yaml", "--goldens", where / "goldens",
                  "--engine", "transformers", "--jobs", 4, *args)


# ------------------------------------------------------------------------ one exit-code contract

def test_the_exit_codes_are_in_help_and_readme():
    for args in (["--help"], ["check", "--help"]):
        text = " ".join(invoke(*args).stdout.split())
        assert "0 all checked and matching" in text and "1 drift found: a verdict, and nothing else" in text
        assert ("2 could not judge: bad input, an unreachable or misbehaving engine, nothing checked, "
                "or an internal error") in text
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Exit codes" in readme
    assert "| 1 | drift found" in readme and "| 2 | could not judge" in readme


def _group_with(callback) -> click.Group:
    from generator.cli import Goldens

    group = Goldens(name="goldens", params=[click.Option(["--debug"], is_flag=True)])
    group.add_command(click.Command("boom", callback=callback))
    return group


def test_any_other_exception_is_one_internal_error_line_and_exit_2_never_1():
    def boom():
        return {}["missing"]

    group = _group_with(boom)
    line = one_line(CliRunner().invoke(group, ["boom"]), "KeyError: 'missing'", prefix="goldens: internal error: ")
    assert "GOLDENS_DEBUG=1 or --debug" in line
    for args, env in ((["boom"], {"GOLDENS_DEBUG": "1"}), (["--debug", "boom"], {})):
        result = CliRunner().invoke(group, args, env=env)
        assert result.exit_code == 2
        assert "Traceback (most recent call last)" in result.stderr
        assert result.stderr.splitlines()[-1] == "goldens: internal error: KeyError: 'missing'"


def test_an_unexpected_failure_of_a_real_command_is_exit_2_not_1(tmp_path):
    """GOLDENS_CACHE naming a file: the cache cannot be made, whatever the command."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = invoke("models", "--resolve", "--config", ROOT / "models.yaml", env={"GOLDENS_CACHE": str(blocker)})
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("goldens: ")


def test_a_usage_error_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line(invoke("regenerate", "--config", ROOT / "models.yaml", "--out", blocker), "--out", "is a file")
    one_line(invoke("check", "--jobs", "0"), "--jobs")


# ------------------------------------------------------------------- nothing checked is not green

BROKEN_TEMPLATE = "{% if foo %}unterminated {{ bar"


@pytest.mark.parametrize("command", ["regenerate", "check", "render", "prefix"])
def test_a_template_that_does_not_compile_is_a_config_error(command, workspace):
    (workspace / "bad.jinja").write_text("{{ bos_token }}\n" + BROKEN_TEMPLATE, encoding="utf-8")
    path = config(workspace, f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    template: {{file: bad.jinja}}\n"
                             "    shapes: [plain, tools, multi-turn]\n")
    request = workspace / "request.json"
    request.write_text('{"messages": [{"role": "user", "content": "hi"}]}')
    args = {
        "regenerate": ["regenerate", "--config", path, "--out", workspace / "out"],
        "check": ["check", "--config", path, "--goldens", workspace / "goldens", "--engine", "transformers"],
        "render": ["render", "--config", path, "--model", "qwen3", "--request", request],
        "prefix": ["prefix", "--config", path, "--model", "qwen3"],
    }[command]
    one_line(invoke(*args), "qwen3: the chat template (file:bad.jinja) does not compile: line 2",
             repr(BROKEN_TEMPLATE), "unexpected end of template")
    assert not (workspace / "out").exists()


RAISES = ("models:\n  qwen3:\n    tokenizer: " + QWEN + "\n"
          "    template: {inline: \"{{ raise_exception('not this one') }}\"}\n"
          "    shapes: [plain, tools, multi-turn]\n")


def test_a_template_that_refuses_every_case_is_not_green(workspace):
    path = config(workspace, RAISES)
    one_line(invoke("regenerate", "--config", path, "--out", workspace / "out"),
             "qwen3: the template refused every case (3 of 3)", "not this one")
    assert not (workspace / "out").exists()
    # goldens that recorded a refusal for every case (as an older goldens wrote them) check nothing
    model = CONFIG.models["qwen3"]
    path = config(workspace, RAISES.replace("[plain, tools, multi-turn]",
                                            "[" + ", ".join(c.shape for c in model_cases(model)[:3]) + "]"))
    raising = models.load(path)
    sha = resolve(raising.models["qwen3"], raising).template_sha256  # rendered from this template: not stale
    for case in model_cases(model)[:3]:
        item = golden_file.read(golden_file.golden_path(GOLDENS, case.id))
        item.outcome, item.ids, item.pieces, item.prompt = "error", [], [], None
        item.error, item.extra = "TemplateError: not this one", {}
        item.provenance = {**item.provenance, "template_sha256": sha, "template": "inline"}
        files.atomic_write(golden_file.golden_path(workspace / "goldens", case.id), golden_file.dumps(item))
    out = workspace / "out.md"
    result = check(workspace, "--report", out, config_path=path)
    one_line(result, "transformers refused every case of qwen3 (3 of 3), so nothing was judged")
    assert "failed (3 error)" in out.read_text(encoding="utf-8")


def test_prefix_that_judged_nothing_exits_2(workspace):
    path = config(workspace, RAISES)
    one_line(invoke("prefix", "--config", path, "--model", "qwen3"),
             "qwen3: no request pair was judged on transformers", "not this one")


@pytest.mark.parametrize("kwargs", ['{"tools": 5}', '{"messages": []}', '{"add_generation_prompt": false}'])
def test_prefix_kwargs_that_collide_with_request_fields_are_refused(kwargs):
    name = next(iter(json.loads(kwargs)))
    one_line(invoke("prefix", "--config", ROOT / "models.yaml", "--model", "qwen3", "--kwargs", kwargs),
             f"--kwargs.{name}: {name!r} is a request field")


def test_prefix_refuses_an_engine_the_model_does_not_list():
    one_line(invoke("prefix", "--config", ROOT / "models.yaml", "--model", "qwen3", "--engine", "mistral-common"),
             "qwen3 does not list engine 'mistral-common'")


# -------------------------------------------------------------------- bad input is one line

@pytest.mark.parametrize("content, needle", [
    ('{"messages": ' + "[" * 10_000 + "]" * 10_000 + "}", "nested deeper than 100 levels"),
    ('{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
    ('{"messages": [{"role": "user", "content": "x"}], "n": ' + "9" * 5000 + "}", "an integer of 5000 digits"),
    (b'{"messages": [{"role": "user", "content": "\xff"}]}', "not UTF-8 (byte 0xff at offset 43)"),
    ('{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"tools": []}}',
     "chat_template_kwargs.tools"),
])
def test_a_bad_request_file_is_one_line_naming_it(content, needle, tmp_path):
    request = tmp_path / "request.json"
    request.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    one_line(invoke("render", "--config", ROOT / "models.yaml", "--model", "qwen3", "--request", request),
             str(request), needle)


@pytest.mark.parametrize("setup, needle", [
    ("no-tokenizer-json", "dir:tok: no tokenizer.json"),
    ("tokenizer-json-not-json", "tokenizer.json: not valid JSON"),
    ("tokenizer-json-not-a-tokenizer", "cannot load the tokenizer"),
    ("template-is-a-directory", "tmpl.jinja: is a directory"),
    ("template-is-binary", "tmpl.jinja: not UTF-8 text (byte 0x89 at offset 0)"),
    ("config-not-utf8", "m.yaml: not UTF-8 (byte 0xe9"),
])
def test_bad_sources_are_one_line_not_a_traceback(setup, needle, tmp_path):
    tok = tmp_path / "tok"
    shutil.copytree(Path(resolve(CONFIG.models["qwen3"], CONFIG).tokenizer_dir), tok)
    template = "template: {inline: \"{{ messages[0].content }}\"}"
    if setup == "no-tokenizer-json":
        (tok / "tokenizer.json").unlink()
    elif setup == "tokenizer-json-not-json":
        (tok / "tokenizer.json").write_text("{not json")
    elif setup == "tokenizer-json-not-a-tokenizer":
        (tok / "tokenizer.json").write_text('{"version": "1.0", "model": 5}')
    elif setup == "template-is-a-directory":
        (tmp_path / "tmpl.jinja").mkdir()
        template = "template: {file: tmpl.jinja}"
    elif setup == "template-is-binary":
        (tmp_path / "tmpl.jinja").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
        template = "template: {file: tmpl.jinja}"
    body = f"models:\n  m:\n    tokenizer: {{dir: tok}}\n    {template}\n    shapes: [plain]\n    # \u00e9 (a non-ASCII byte for the latin-1 case)\n"
    path = config(tmp_path, body)
    if setup == "config-not-utf8":
        path.write_bytes(body.encode("latin-1"))
    one_line(invoke("regenerate", "--config", path, "--out", tmp_path / "out"), needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("edit, needle", [
    (lambda data: {**data, "request": "hello"}, "request: expected a JSON object with `messages`"),
    (lambda data: {**data, "request": {"messages": [{"role": "wizard"}]}}, "request: messages[0]: needs a role"),
    (lambda data: {**data, "case": "qwen3/tools"}, "its case is 'qwen3/tools' but its path names 'qwen3/plain'"),
])
def test_a_golden_that_is_not_what_its_path_says_is_exit_2_not_drift(edit, needle, workspace):
    path = workspace / "goldens" / "qwen3" / "plain.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")
    one_line(check(workspace, "--model", "qwen3"), str(path), needle)


# ------------------------------------------------------------------ files the tool does not own

def test_a_report_is_written_only_to_a_regular_file_or_a_new_path(workspace, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    to_null = tmp_path / "null-link"
    to_null.symlink_to("/dev/null")
    one_line(check(workspace, "--model", "gemma3", "--report", fifo), "is a FIFO",
             "a report is written only to a regular file or a new path")
    one_line(check(workspace, "--model", "gemma3", "--junit", to_null), "is a character device (a link to /dev/null)")
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and to_null.is_symlink()
    assert os.readlink(to_null) == "/dev/null" and stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.slow
def test_a_report_through_a_symlink_updates_its_target_and_keeps_its_mode(workspace, tmp_path):
    target = tmp_path / "reports" / "goldens.md"
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o640)
    link = tmp_path / "report.md"
    link.symlink_to(target)
    result = check(workspace, "--model", "gemma3", "--report", link)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text(encoding="utf-8").startswith("**goldens check: passed**")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert not [p.name for p in tmp_path.rglob(".*") if p.name.endswith((".tmp", ".lock"))]


def test_rewritten_files_keep_their_mode_and_new_ones_get_the_umask(tmp_path):
    path = config(tmp_path, f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    shapes: [plain]\n")
    out = tmp_path / "out"
    old = os.umask(0o027)
    try:
        assert invoke("regenerate", "--config", path, "--out", out).exit_code == 0
        golden = out / "qwen3" / "plain.json"
        assert stat.S_IMODE(golden.stat().st_mode) == 0o640
        golden.chmod(0o664)
        golden.write_text(golden.read_text().replace('"token_count"', '"token_count" ', 1))
        assert invoke("regenerate", "--config", path, "--out", out).exit_code == 0
        assert stat.S_IMODE(golden.stat().st_mode) == 0o664
    finally:
        os.umask(old)


def test_update_pins_writes_a_symlinked_config_through_its_link(tmp_path):
    real = tmp_path / "conf" / "models.yaml"
    real.parent.mkdir()
    real.write_text(f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    shapes: [plain]\n"
                    f"    pins: {{template_sha256: {'a' * 64}}}\n", encoding="utf-8")
    real.chmod(0o640)
    link = tmp_path / "models.yaml"
    link.symlink_to(real)
    assert invoke("regenerate", "--config", link, "--out", tmp_path / "out").exit_code == 2
    result = invoke("regenerate", "--config", link, "--out", tmp_path / "out", "--update-pins")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert link.is_symlink() and "a" * 64 not in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_regenerate_never_removes_a_file_that_is_not_its_own(tmp_path):
    out = tmp_path / "goldens"
    shutil.copytree(GOLDENS / "qwen3", out / "qwen3")
    shutil.copytree(GOLDENS / "gemma3", out / "gemma3")
    mine = {
        out / "qwen3" / "notes.json": '{"mine": true}\n',
        out / "qwen3" / "plain.backup.json": (GOLDENS / "qwen3" / "plain.json").read_text(),
        out / "qwen3" / "README.md": "notes\n",
    }
    for path, text in mine.items():
        path.write_text(text)
    # a copy under another case's name is not that case's golden
    (out / "qwen3" / "renamed.json").write_text((GOLDENS / "qwen3" / "plain.json").read_text())
    path = config(tmp_path, f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    shapes: [plain]\n")
    result = invoke("regenerate", "--config", path, "--out", out)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    for path, text in mine.items():
        assert path.read_text() == text
    assert (out / "qwen3" / "renamed.json").exists()
    stale = sorted(p for p in (GOLDENS / "qwen3").rglob("*.json") if p.name != "plain.json")
    removed = [line for line in result.stdout.splitlines() if line.startswith("removed ")]
    assert len(removed) == len(stale)
    assert f"removed {out / 'qwen3' / 'plain_ends-assistant.llama-server.json'} (ledger entry)" in removed
    assert f"removed {out / 'qwen3' / 'agentic-turn.vllm.stand-in.json'} (ledger entry)" in removed
    assert result.stdout.splitlines()[-1] == f"1 written, 0 unchanged, {len(stale)} removed" or \
        result.stdout.splitlines()[-1] == f"0 written, 1 unchanged, {len(stale)} removed"
    # gemma3 is not in this config: its directory is left alone, and said so
    assert sorted(p.name for p in (out / "gemma3").iterdir()) == sorted(p.name for p in (GOLDENS / "gemma3").iterdir())
    assert f"left {out / 'gemma3'}/ alone" in result.stdout


def test_another_config_on_the_default_out_leaves_the_other_models_alone(workspace):
    index = workspace / "goldens" / "regenerate.index"  # qwen3's lines in it change, the others' stay
    others = [line for line in index.read_text().splitlines() if line.split()[1:2] != ["qwen3"]
              and not line.startswith("golden qwen3/")]
    before = {p: p.read_bytes() for p in (workspace / "goldens").rglob("*")
              if p.is_file() and "qwen3" not in p.parts and p != index}
    path = config(workspace, f"models:\n  qwen3:\n    tokenizer: {QWEN}\n", name="other.yaml")
    result = _in(workspace, "regenerate", "--config", path)  # the default --out: ./goldens
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert {p: p.read_bytes() for p in before} == before
    assert set(others) <= set(index.read_text().splitlines())
    removed = [line for line in result.stdout.splitlines() if line.startswith("removed ")]
    assert removed and all(line.startswith("removed goldens/qwen3/") for line in removed)  # its own stale


def _in(directory: Path, *args):
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        return invoke(*args)
    finally:
        os.chdir(cwd)


def test_temp_and_lock_files_a_killed_run_leaves_are_ignored_by_git():
    """SIGKILL cannot be caught: what atomic_write and a report claim leave must not be committed."""
    names = ["goldens/qwen3/.plain.json.abc123.tmp", "out/.goldens.md.lock", ".models.yaml.x1y2.tmp"]
    result = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True)
    assert result.stdout.split() == names, (result.stdout, result.stderr)


# ------------------------------------------------------------------------------------ models.yaml

@pytest.mark.parametrize("body, needle", [
    (f"models:\n  qwen3:\n    tokenizer: {QWEN}\n  qwen3:\n    tokenizer: {{pack: \"npm:gemma3\"}}\n",
     "line 4: duplicate key 'qwen3' (first given at line 2)"),
    (f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    shapes: [plain]\n    shapes: [tools]\n",
     "line 5: duplicate key 'shapes' (first given at line 4)"),
    (f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    variants:\n      off: {{enable_thinking: false}}\n",
     "line 5: key 'off' is read by YAML as the boolean False; quote it (\"off\")"),
    (f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    variants:\n      no: {{enable_thinking: false}}\n",
     "key 'no' is read by YAML as the boolean False"),
    (f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    variants:\n      yes: {{enable_thinking: true}}\n",
     "key 'yes' is read by YAML as the boolean True"),
    (f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    variants:\n      on: {{enable_thinking: true}}\n",
     "key 'on' is read by YAML as the boolean True"),
    *[(f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    variants:\n      x: {{{name}: {value}}}\n",
       f"models.qwen3.variants.x.{name}: {name!r} is a request field")
      for name, value in (("tools", "[]"), ("messages", "[]"), ("add_generation_prompt", "false"),
                          ("documents", "[]"), ("continue_final_message", "true"))],
    (f"models:\n  qwen3:\n    tokenizer: {QWEN}\n    kwargs: {{tools: []}}\n",
     "models.qwen3.kwargs.tools: 'tools' is a request field"),
])
def test_models_yaml_surprises_are_one_line(body, needle, tmp_path):
    path = config(tmp_path, body)
    one_line(invoke("regenerate", "--config", path, "--out", tmp_path / "out"), "m.yaml", needle)
    assert not (tmp_path / "out").exists()


# -------------------------------------------------------------------------------------- one judge

def test_the_judge_on_every_kind_of_answer(tmp_path):
    """Every kind of answer through verdict.verdict, the one judge of `goldens check` and the tests."""
    root = tmp_path / "goldens"
    shutil.copytree(GOLDENS / "qwen3", root / "qwen3")
    engine = TransformersEngine(resolve(CONFIG.models["qwen3"], CONFIG), CONFIG.date)
    plain = golden_file.read(root / "qwen3" / "plain.json")
    moved = list(plain.ids)
    moved[3] = 7
    item = golden_file.read(root / "qwen3" / "tools.json")
    ledger.write(root, item, "transformers", "reviewed", item.ids[:-1], item.pieces[:-1], None)
    ledger.write(root, golden_file.read(root / "qwen3" / "no-system.json"), "transformers", "reviewed",
                 [], [], None, refused="it refuses")
    answers = {
        ("qwen3/plain", "same ids"): Ids(plain.ids),
        ("qwen3/plain", "one token moved"): Ids(moved),
        ("qwen3/plain", "a refusal the reference did not make"): Refused("no"),
        ("qwen3/tools", "exactly the ledger entry"): Ids(item.ids[:-1]),
        ("qwen3/tools", "the reference again: the entry is stale"): Ids(item.ids),
        ("qwen3/no-system", "the recorded refusal"): Refused("it refuses, in other words"),
        ("qwen3/no-system", "ids where a refusal was recorded"): Ids([1, 2]),
    }
    assert [verdict.verdict(golden_file.read(golden_file.golden_path(root, c)),
                          ledger.read(root, c, engine.name), engine.name, g).ok
            for (c, _), g in answers.items()] == [True, False, False, True, False, True, False]
    # and judge() is verdict() on the engine's real answer
    assert judge.judge(engine, plain, root).status == "match"
