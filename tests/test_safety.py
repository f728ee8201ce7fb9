"""Hostile input and hostile servers (issue 23's probe): no secret leaves the tool in any form,
nothing is written outside goldens' own folders or through a symlink, names are safe by
construction, every file read is a bounded regular file, and what a server says is untrusted.

Servers are the stand-in of tests/test_ollama.py (real HTTP on 127.0.0.1), answering as the
probe's hostile servers did.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDENS, ROOT, golden_of, tokenizer_of

from generator.cli import main

KEY = 'sk-Zq9/x"Y+w&<k>7Hd2'
HEADER = "hdr-Secret/Value+42"
PASSWORD = "p@ss:w0rd"
SECRETS = [KEY, HEADER, PASSWORD]
ENV = {"GOLDENS_SAFETY_KEY": KEY}


@pytest.fixture(autouse=True)
def _forget_secrets():
    """Each CLI run registers the secrets it was given; the next test starts clean."""
    yield
    import generator

    if (Path(generator.__file__).parent / "redaction.py").exists():  # (absent before issue 23)
        from generator import redaction

        redaction.clear()


@pytest.fixture
def stand_in():
    from test_ollama import StandIn

    server = StandIn()
    yield server
    server.stop()


def invoke(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def one_line(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("goldens: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def leaks(text: str, secret: str, window: int = 6) -> list[str]:
    """Any run of `window` characters of the secret, raw or escaped as JSON, a URL or XML."""
    forms = {secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe=""),
             secret.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")}
    # a window that is one XML entity alone (`&quot;`) is the escape of one character, in any report
    return sorted({form[i:i + window] for form in forms for i in range(len(form) - window + 1)
                   if form[i:i + window] in text and not re.fullmatch(r"&\w+;", form[i:i + window])})


def reply(body, **fields) -> tuple[int, bytes, dict]:
    out = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}}],
           "usage": {"prompt_tokens": 25}, **fields}
    return 200, json.dumps(out).encode(), {}


def secret_check(stand_in, tmp_path, answer, *extra):
    """`goldens check --engine openai` with a key, a header secret and a password in the URL,
    against a server answering `answer(body)`; every output the run made, as one text."""
    stand_in.reply = answer
    host = stand_in.url.removeprefix("http://")
    url = f"http://user:{urllib.parse.quote(PASSWORD, safe='')}@{host}/v1"
    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "openai",
                    "--url", f"openai={url}", "--model", "qwen3", "--api-key-env", "GOLDENS_SAFETY_KEY",
                    "--header", f"X-Token: {HEADER}", "--junit", tmp_path / "out.xml",
                    "--report", tmp_path / "out.md", *extra, env=ENV)
    written = [p.read_text() for p in (tmp_path / "out.xml", tmp_path / "out.md") if p.exists()]
    return result, "\n".join([result.stdout, result.stderr, *written])


def _pieces_ids() -> list[int]:
    return tokenizer_of("qwen3")(KEY + " " + HEADER, add_special_tokens=False)["input_ids"]


ECHOES = {
    # a key echoed as a token id, as a count, in prompt_text beside drifted ids, spelled out
    # across token pieces, escaped inside an error body, cut short, and as a model name
    "token-id": lambda body: None if body is None else reply(body, prompt_token_ids=[KEY]),
    "usage": lambda body: None if body is None else reply(body, usage={"prompt_tokens": HEADER}),
    "prompt-text": lambda body: None if body is None else reply(
        body, prompt_token_ids=[1, 2, 3], prompt_text=f"{KEY} {HEADER} {PASSWORD}"),
    "pieces": lambda body: None if body is None else reply(body, prompt_token_ids=_pieces_ids()),
    "escaped": lambda body: None if body is None else (500, json.dumps(
        {"error": f"bad key {json.dumps(KEY)} {urllib.parse.quote(HEADER)} {urllib.parse.quote(PASSWORD)}"}
    ).encode(), {}),
    "cut-short": lambda body: None if body is None else (401, f"key {KEY[:-3]}... rejected".encode(), {}),
    "model-list": lambda body: (200, json.dumps({"data": [{"id": KEY}, {"id": HEADER}]}).encode(), {})
    if body is None else None,
}


@pytest.mark.parametrize("echo", sorted(ECHOES))
@pytest.mark.slow
def test_no_configured_secret_reaches_any_output_in_any_form(stand_in, tmp_path, echo):
    extra = () if echo == "model-list" else ("--served-model", "qwen3=m")
    result, text = secret_check(stand_in, tmp_path, ECHOES[echo], *extra)
    assert result.exit_code in (1, 2), (result.exit_code, result.stdout, result.stderr)
    assert "[redacted]" in text
    for secret in SECRETS:
        assert leaks(text, secret) == [], (echo, secret)


def test_a_header_typo_never_prints_the_key():
    result = invoke("check", "--engine", "openai", "--url", "openai=http://127.0.0.1:9", "--model", "qwen3",
                    "--header", f"Authorization=Bearer {KEY}")
    line = one_line(result, '--header #1: expected "Name: value"')
    assert leaks(line, KEY, 4) == [] and "Authorization=" not in line


@pytest.mark.slow
def test_a_three_character_key_is_redacted_too(stand_in, tmp_path):
    stand_in.reply = lambda body: None if body is None else reply(body, usage={"prompt_tokens": "k9Q"})
    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "openai",
                    "--url", f"openai={stand_in.url}", "--served-model", "qwen3=m", "--api-key-env", "K",
                    "--report", tmp_path / "out.md", env={"K": "k9Q"})
    assert result.exit_code == 2
    text = result.stderr + (tmp_path / "out.md").read_text()
    assert "k9Q" not in text and "[redacted]" in text


def test_a_ledger_entry_carries_no_secret(tmp_path):
    """Files go through files.atomic_write, which redacts: a ledger entry holding an echoed key."""
    from generator import files, redaction

    redaction.register(KEY)
    path = tmp_path / "goldens" / "m" / "plain.openai.json"
    files.atomic_write(path, json.dumps({"reason": f"server said {KEY}"}), within=tmp_path / "goldens")
    assert leaks(path.read_text(), KEY) == [] and "[redacted]" in path.read_text()


# ------------------------------------------------------------------- writes only where owned

@pytest.fixture
def goldens_copy(tmp_path) -> Path:
    out = tmp_path / "goldens"
    shutil.copytree(GOLDENS, out)
    return out


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() and not p.is_symlink() else b"<link>")
            for p in sorted(root.rglob("*"))}


@pytest.mark.slow
@pytest.mark.parametrize("what", ["golden", "model-folder", "index"])
def test_a_symlink_in_goldens_is_one_line_and_nothing_is_written(goldens_copy, tmp_path, what):
    victim = tmp_path / "victim"
    if what == "golden":
        victim.write_text("precious\n")
        (goldens_copy / "qwen3" / "plain.json").unlink()
        os.symlink(victim, goldens_copy / "qwen3" / "plain.json")
    elif what == "model-folder":
        shutil.copytree(goldens_copy / "qwen3", victim)
        (victim / "plain.json").write_text("precious\n")
        shutil.rmtree(goldens_copy / "qwen3")
        os.symlink(victim, goldens_copy / "qwen3")
    else:
        victim.write_text("precious\n")
        (goldens_copy / "regenerate.index").unlink()
        os.symlink(victim, goldens_copy / "regenerate.index")
    before = _snapshot(goldens_copy)
    victim_before = _snapshot(victim) if victim.is_dir() else victim.read_bytes()
    result = invoke("regenerate", "--config", ROOT / "models.yaml", "--out", goldens_copy, "--model", "qwen3")
    one_line(result, "symlink", "nothing written")
    assert _snapshot(goldens_copy) == before
    assert (_snapshot(victim) if victim.is_dir() else victim.read_bytes()) == victim_before


# ------------------------------------------------------------------------- names, by construction

def _config(tmp_path: Path, shapes: str = "[plain]", extra: str = "", name: str = "m") -> Path:
    tok = tmp_path / "tok"
    if not tok.exists():
        from conftest import source_of

        shutil.copytree(source_of("qwen3").tokenizer_dir, tok)
    path = tmp_path / "m.yaml"
    path.write_text(f"models:\n  {name}:\n    tokenizer: {{dir: tok}}\n    shapes: {shapes}\n{extra}")
    return path


@pytest.mark.parametrize("stem, needle", [
    ("tools.vllm", "no '.'"),  # would be the vLLM ledger entry of shape `tools`
    ("v1.2", "no '.'"),  # a golden whose path names case `v1`
    ("x" * 100, "at most 64 characters"),
])
def test_a_request_file_name_that_cannot_be_a_golden_is_refused(tmp_path, stem, needle):
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / f"{stem}.json").write_text('{"messages": [{"role": "user", "content": "hi"}]}')
    path = _config(tmp_path, "{requests: [requests/*.json]}")
    line = one_line(invoke("models", "--config", path), needle)
    assert len(line) < 400


@pytest.mark.parametrize("field, needle", [
    ("variant", "variant names are lowercase letters, digits and '-', at most 64"),
    ("model", "model names are lowercase letters"),
])
def test_long_model_and_variant_names_are_refused_before_anything_renders(tmp_path, field, needle):
    long = "v" * 1000  # YAML takes plain keys up to 1024 characters
    path = (_config(tmp_path, extra=f"    variants:\n      {long}: {{}}\n") if field == "variant"
            else _config(tmp_path, name=long))
    line = one_line(invoke("regenerate", "--config", path, "--out", tmp_path / "out"), needle)
    assert len(line) < 400 and not (tmp_path / "out").exists()


def test_a_case_id_that_walks_out_of_its_model_is_refused(goldens_copy):
    before = _snapshot(goldens_copy)
    result = invoke("ledger", "--config", ROOT / "models.yaml", "--engine", "transformers",
                    "--case", "qwen3/../gemma3/plain", "--reason", "x", "--goldens", goldens_copy)
    one_line(result, "--case 'qwen3/../gemma3/plain'", "qwen3 has no such case")
    assert _snapshot(goldens_copy) == before


def test_a_long_engine_name_is_not_echoed_whole():
    line = one_line(invoke("check", "--engine", "e" * 10_000, "--model", "qwen3"), "unknown engine")
    assert len(line) < 600


# ------------------------------------------------------------------- every read is bounded

def _cli(*args, timeout=60, env=None) -> subprocess.CompletedProcess:
    """goldens in its own process, under a deadline and a memory cap: a read that never ends
    (a FIFO) fails the test instead of hanging it, and one that reads /dev/zero stops at 4 GB."""
    import resource

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    try:
        return subprocess.run([sys.executable, "-m", "generator.cli", *map(str, args)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, preexec_fn=cap,
                              env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    except subprocess.TimeoutExpired:
        pytest.fail(f"goldens {' '.join(map(str, args))} did not finish in {timeout} s")


def _one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("goldens: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["fifo", "zero"])
@pytest.mark.parametrize("what", ["config", "request", "template"])
def test_a_fifo_or_device_is_refused_not_read(tmp_path, kind, what):
    special = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        special = Path("/dev/zero")
    needle = "is a FIFO" if kind == "fifo" else "is a character device"
    request = tmp_path / "r.json"
    request.write_text('{"messages": [{"role": "user", "content": "hi"}]}')
    if what == "config":
        _one_line(_cli("models", "--config", special), needle)
    elif what == "request":
        _one_line(_cli("render", "--model", "qwen3", "--request", special), needle)
    else:
        path = _config(tmp_path, extra=f"    template: {{file: {special}}}\n")
        # /dev lies outside the config's folder: named in GOLDENS_ALLOW_PATHS, it is still no file
        _one_line(_cli("render", "--config", path, "--model", "m", "--request", request,
                       env={"GOLDENS_ALLOW_PATHS": "/dev"}), needle)


@pytest.mark.parametrize("what", ["golden", "index"])
@pytest.mark.slow
def test_a_fifo_among_the_goldens_is_one_line_not_a_hang(goldens_copy, what):
    target = goldens_copy / ("qwen3/plain.json" if what == "golden" else "regenerate.index")
    target.unlink()
    os.mkfifo(target)
    _one_line(_cli("regenerate", "--config", ROOT / "models.yaml", "--out", goldens_copy, "--model", "qwen3"),
              "not a regular file")


def test_a_yaml_alias_bomb_is_refused_at_load(tmp_path):
    rows = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    rows += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = _config(tmp_path, extra="    kwargs: {x: *a8}\n")
    path.write_text("x-anchors:\n" + "".join(f"  {row}\n" for row in rows) + path.read_text())
    started = time.monotonic()
    one_line(invoke("models", "--config", path), "YAML aliases expand it to more than 1,000,000 values")
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------- what a server says is untrusted

@pytest.mark.parametrize("ids, needle", [([-1], "token 0 is -1, not a token id"),
                                         ([10 ** 98], "token 0 is an integer of 99 digits, not a token id")])
@pytest.mark.slow
def test_an_out_of_range_id_is_one_line_and_the_report_is_written(stand_in, tmp_path, ids, needle):
    stand_in.reply = lambda body: None if body is None else reply(body, prompt_token_ids=ids)
    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "openai",
                    "--url", f"openai={stand_in.url}", "--served-model", "qwen3=m", "--report", tmp_path / "r.md")
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert [line for line in result.stderr.splitlines() if needle in line], result.stderr
    assert "internal error" not in result.stderr and (tmp_path / "r.md").exists()


@pytest.mark.slow
def test_control_bytes_from_a_server_are_shown_escaped(stand_in):
    stand_in.reply = (500, b"\x1b[2J\x1b]0;owned\x07\x00 bye", {})
    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "openai",
                    "--url", f"openai={stand_in.url}", "--served-model", "qwen3=m")
    assert result.exit_code == 2
    assert not any(c in result.stderr for c in "\x1b\x07\x00") and "\\x1b[2J" in result.stderr


@pytest.mark.slow
def test_a_server_that_always_answers_429_costs_its_budget_not_the_run(stand_in):
    from generator.engines import EngineError
    from generator.engines.openai.engine import OpenAIEngine

    stand_in.reply = (429, b'{"error": "slow down"}', {"Retry-After": "1"})
    engine = OpenAIEngine(stand_in.url, "m")
    engine.remote._budget = 2.0
    request = golden_of("qwen3/plain").request
    with pytest.raises(EngineError, match="still rate-limited"):
        engine.ids(request)
    started = time.monotonic()
    with pytest.raises(EngineError, match="still rate-limited"):
        engine.ids(request)  # the budget is spent: no more waiting
    assert time.monotonic() - started < 1.0


def test_a_redirect_is_said_as_one(stand_in):
    from generator.engines import EngineError
    from generator.engines.openai.engine import OpenAIEngine

    stand_in.reply = (302, b"", {"Location": "https://elsewhere.example/v1/chat/completions"})
    with pytest.raises(EngineError, match="HTTP 302: redirects to https://elsewhere.example"):
        OpenAIEngine(stand_in.url, "m").ids(golden_of("qwen3/plain").request)


# ------------------------------------------------------------------------------- the render deadline

@pytest.mark.slow
def test_a_template_that_never_ends_stops_at_the_render_deadline(tmp_path):
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    path = _config(tmp_path, extra=f'    template: {{inline: "{loop}"}}\n')
    request = tmp_path / "r.json"
    request.write_text('{"messages": [{"role": "user", "content": "hi"}]}')
    done = _cli("render", "--config", path, "--model", "m", "--request", request,
                env={"GOLDENS_RENDER_DEADLINE": "1"})
    _one_line(done, "the template did not finish rendering within 1 s", "GOLDENS_RENDER_DEADLINE")


# ------------------------------------------------------------------------------- low and poor

def test_bad_values_are_one_line_not_internal_errors(stand_in, tmp_path):
    one_line(invoke("check", "--engine", "openai", "--url", "openai=http://127.0.0.1:99999", "--model", "qwen3"),
             "port 99999 is out of range")
    path = _config(tmp_path)
    path.write_text("date: 2026-02-30\n" + path.read_text())
    one_line(invoke("models", "--config", path), "line 1: '2026-02-30' is not a date")
    one_line(invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "openai",
                    "--url", f"openai={stand_in.url}", "--served-model", "qwen3=m", "--report", "/proc/r.md"),
             "/proc/r.md: cannot write")
    line = one_line(invoke("check", "--bogus"))
    assert line.endswith("(see goldens check --help)"), line


def test_an_audio_part_is_not_called_an_image(tmp_path):
    (tmp_path / "requests").mkdir()
    (tmp_path / "requests" / "voice.json").write_text(json.dumps({"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}))
    path = _config(tmp_path, "{only: [plain], requests: [requests/*.json]}")
    one_line(invoke("models", "--config", path), "shape 'voice' carries audio and needs `processor:` settings")


def test_a_symlink_loop_among_request_files_is_named(tmp_path):
    (tmp_path / "requests").mkdir()
    os.symlink(tmp_path / "requests" / "b.json", tmp_path / "requests" / "a.json")
    os.symlink(tmp_path / "requests" / "a.json", tmp_path / "requests" / "b.json")
    path = _config(tmp_path, "{requests: [requests/*.json]}")
    one_line(invoke("models", "--config", path), "is a symlink loop")


def test_a_string_token_count_is_said_as_such(tmp_path):
    from generator.errors import GoldensError
    from generator.goldens import golden_file

    data = json.loads((GOLDENS / "qwen3" / "plain.json").read_text())
    data["token_count"] = str(data["token_count"])
    with pytest.raises(GoldensError, match="token_count is '25' \\(str\\), not an integer"):
        golden_file.loads(json.dumps(data), "plain.json")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    (repo / "goldens" / "qwen3").mkdir(parents=True)
    shutil.copy(GOLDENS / "qwen3" / "plain.json", repo / "goldens" / "qwen3" / "plain.json")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "goldens")
    return repo


def test_diff_prints_no_workflow_command_from_a_folder_name(repo):
    name = "x\n::warning title=pwned::owned"
    folder = repo / "goldens" / name
    folder.mkdir()
    data = json.loads((GOLDENS / "qwen3" / "plain.json").read_text())
    data["case"] = f"{name}/plain"
    (folder / "plain.json").write_text(json.dumps(data, indent=2) + "\n")
    result = invoke("diff", "--goldens", repo / "goldens")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert not [line for line in result.stdout.splitlines() if line.startswith("::")], result.stdout
    assert "x\\x0a::warning" in result.stdout


def test_diff_leaves_a_users_own_json_alone(repo):
    (repo / "goldens" / "qwen3" / "notes.json").write_text('{"todo": "review the tools shape"}\n')
    result = invoke("diff", "--goldens", repo / "goldens")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "no golden changed against HEAD" in result.stdout


# ------------------------------------------------------- redaction keeps reports true and valid

def _reports(stand_in, tmp_path, *extra, env=None):
    stand_in.reply = lambda body: None if body is None else reply(body, usage={"prompt_tokens": 25})
    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "openai",
                    "--url", f"openai={stand_in.url}", "--served-model", "qwen3=m", "--model", "qwen3",
                    "--junit", tmp_path / "out.xml", "--report", tmp_path / "out.md",
                    "--results", tmp_path / "out.json", *extra, env=env)
    import xml.etree.ElementTree as ET

    results = json.loads((tmp_path / "out.json").read_text())  # still JSON
    suites = ET.parse(tmp_path / "out.xml").getroot()  # still XML
    return result, results, suites, (tmp_path / "out.md").read_text()


@pytest.mark.slow
def test_a_setting_header_is_no_secret_and_reports_keep_their_numbers(stand_in, tmp_path):
    """`--header 'X-Debug: 1'` turned every 1 in every report into [redacted] (issue 34)."""
    result, results, suites, markdown = _reports(stand_in, tmp_path, "--header", "X-Debug: 1")
    text = result.stdout + result.stderr + markdown + json.dumps(results)
    assert "[redacted]" not in text
    tests = sum(int(suite.get("tests")) for suite in suites)
    assert tests == len([o for g in results["groups"] for o in g["outcomes"]]) and tests > 1
    assert str(tests) in markdown


@pytest.mark.slow
def test_a_one_letter_key_is_redacted_as_a_token_not_inside_words(stand_in, tmp_path):
    result, results, suites, markdown = _reports(stand_in, tmp_path, "--api-key-env", "K", env={"K": "e"})
    assert "checked" in result.stdout + result.stderr  # the words around the key survive
    assert "engine" in markdown and "qwen3" in json.dumps(results)
    assert suites.tag == "testsuites"


def test_redaction_rewrites_no_structure_in_a_json_or_xml_file(tmp_path):
    """The file backstop sees values as decoded (a key right after an escape, `\\n` + key, is
    still the key: issue 44) and never touches a word of ours: a configured `1` is no secret to
    hunt for in a report, where it could be any count."""
    from generator import files, redaction

    redaction.register("1", KEY)
    data = {"count": 1, "tokens": [[1, "1"], [11, "a 1 b"]], "key": f"echo {KEY}", "escaped": f"x\n{KEY}\tend"}
    files.atomic_write(tmp_path / "r.json", json.dumps(data))
    back = json.loads((tmp_path / "r.json").read_text())
    assert back["count"] == 1 and back["tokens"] == [[1, "1"], [11, "a 1 b"]]
    assert back["key"] == "echo [redacted]" and back["escaped"] == "x\n[redacted]\tend"
    from xml.sax.saxutils import escape, quoteattr

    files.atomic_write(tmp_path / "r.xml", f'<a tests="1" note={quoteattr("key " + KEY)}>1 <b>{escape(KEY)}</b></a>')
    import xml.etree.ElementTree as ET

    root = ET.parse(tmp_path / "r.xml").getroot()  # still XML: only values were touched
    assert root.get("tests") == "1" and root.text == "1 " and root[0].tag == "b"
    assert root.get("note") == "key [redacted]" and root[0].text == "[redacted]"
    assert leaks(ET.tostring(root, encoding="unicode"), KEY) == []


@pytest.mark.parametrize("value", ["none", "36", "user", "qwen3", "plain", "1", "m", "e"])
@pytest.mark.slow
def test_a_common_value_as_a_secret_rewrites_no_id_word_or_number(stand_in, tmp_path, value):
    """Issue 44: `--api-key-env` holding `none` (local servers' usual dummy key) rewrote case ids
    (`tool-choice-[redacted]`) in every report, and `report merge` then refused the file; a
    credential header of `36` or `user` blanked those words everywhere. A secret is taken out
    where it can appear, what a server says, not wherever the word stands."""
    result, results, suites, markdown = _reports(stand_in, tmp_path, "--api-key-env", "K",
                                                 "--header", f"X-Api-Key: {value}", env={"K": value})
    text = result.stdout + result.stderr + markdown + json.dumps(results)
    assert "[redacted]" not in text, [line for line in text.splitlines() if "[redacted]" in line][:3]
    cases = [o["case"] for g in results["groups"] for o in g["outcomes"]]
    assert "qwen3/tools-reduced_tool-choice-none" in cases and "qwen3/plain_effort-none" in cases, cases
    merged = invoke("report", "merge", tmp_path / "out.json")
    assert merged.exit_code in (0, 1), (merged.exit_code, merged.stderr)


@pytest.mark.parametrize("neighbour", ["\n", "x", "\\", "é"])
@pytest.mark.parametrize("key", ["sk-1", "sk-12345"])
@pytest.mark.slow
def test_a_short_key_echoed_beside_anything_is_redacted_in_every_report(stand_in, tmp_path, key, neighbour):
    """Issue 44: `hello\\nsk-12345\\n\\tend` from a server put the key in the results file,
    the Markdown and the JUnit: redaction ran on escaped text, where the key follows the escape's
    letter. It runs on the server's values, whatever the key's length or neighbours."""
    stand_in.reply = lambda body: None if body is None else (400, json.dumps(
        {"error": f"hello{neighbour}{key}{neighbour}end", "detail": [f"{neighbour}{key}"]}).encode(), {})
    result = invoke("check", "--config", ROOT / "models.yaml", "--goldens", GOLDENS, "--engine", "openai",
                    "--url", f"openai={stand_in.url}", "--served-model", "qwen3=m", "--model", "qwen3",
                    "--api-key-env", "K",
                    "--junit", tmp_path / "out.xml", "--report", tmp_path / "out.md",
                    "--results", tmp_path / "out.json", env={"K": key})
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    written = [(tmp_path / name).read_text() for name in ("out.xml", "out.md", "out.json")]
    for text in [result.stdout, result.stderr, *written]:
        assert key not in text and json.dumps(key)[1:-1] not in text, text[:2000]
    assert all("[redacted]" in text for text in written)


# ------------------------------------------------- round four: configs a pull request can bring

def _one_model(tmp_path, template: str = "{{ messages[0].content }}", extra: str = "", tokenizer=None) -> Path:
    (tmp_path / "t.jinja").write_text(template)
    config = tmp_path / "models.yaml"
    config.write_text("date: 2026-01-15\nmodels:\n  m:\n    tokenizer: " + (tokenizer or '{pack: "npm:qwen3"}')
                      + "\n    template: {file: t.jinja}\n    shapes: {only: [plain]}\n"
                      "    engines: [transformers]\n" + extra)
    return config


def test_a_template_outside_the_config_folder_is_refused(tmp_path, monkeypatch):
    """A template at /proc/self/environ put the CI's environment into goldens and the PR comment."""
    repo = tmp_path / "repo"
    repo.mkdir()
    config = _one_model(repo)
    config.write_text(config.read_text().replace("{file: t.jinja}", "{file: /proc/self/environ}"))
    line = one_line(invoke("regenerate", "--config", config, "--goldens", tmp_path / "g"),
                    "/proc/self/environ: outside the folder of models.yaml", "GOLDENS_ALLOW_PATHS")
    assert "PATH=" not in line and not (tmp_path / "g").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "t.jinja").write_text("{{ messages[0].content }}")
    config.write_text(config.read_text().replace("/proc/self/environ", str(elsewhere / "t.jinja")))
    one_line(invoke("regenerate", "--config", config, "--goldens", tmp_path / "g"), "outside the folder")
    monkeypatch.setenv("GOLDENS_ALLOW_PATHS", str(elsewhere))  # named by the user, not the config
    result = invoke("regenerate", "--config", config, "--goldens", tmp_path / "g")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("where", ["parent", "absolute", "link-to-environ", "linked-folder", "dotdot-inside"])
def test_a_request_glob_reads_only_inside_the_config_folder(tmp_path, monkeypatch, where):
    """Issue 44: request globs reached `../outside/*.json`, absolute paths and links to
    /proc/self/environ, which templates and tokenizers could not: one rule for every file a
    config names (files.config_path), and GOLDENS_ALLOW_PATHS the user's way out."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "requests").mkdir(parents=True)
    outside.mkdir()
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    (outside / "secretish.json").write_text(body)
    pattern = {"parent": "../outside/*.json", "absolute": str(outside / "*.json"),
               "link-to-environ": "requests/*.json", "linked-folder": "linked/*.json",
               "dotdot-inside": "requests/../requests/*.json"}[where]
    if where == "link-to-environ":
        (repo / "requests" / "environ.json").symlink_to("/proc/self/environ")
    if where == "linked-folder":
        (repo / "linked").symlink_to(outside, target_is_directory=True)
    if where == "dotdot-inside":  # inside, however it is spelled: taken
        (repo / "requests" / "inside.json").write_text(body)
    config = _one_model(repo)
    config.write_text(config.read_text().replace("{only: [plain]}", "{only: [plain], requests: [" + json.dumps(pattern) + "]}"))
    result = invoke("models", "--config", config)
    if where == "dotdot-inside":
        assert result.exit_code == 0, result.output
        return
    line = one_line(result, "outside the folder of models.yaml", "GOLDENS_ALLOW_PATHS")
    assert "PATH=" not in line
    if where != "link-to-environ":  # a folder the user names is theirs to allow
        monkeypatch.setenv("GOLDENS_ALLOW_PATHS", str(outside))
        assert invoke("models", "--config", config).exit_code == 0


@pytest.mark.parametrize("value", ["llama.cpp:../../../../etc/passwd", "llama.cpp:../templates/x.jinja",
                                   "llama.cpp:sub/../x.jinja"])
def test_a_pack_template_name_cannot_climb_out(tmp_path, value):
    config = _one_model(tmp_path)
    config.write_text(config.read_text().replace("{file: t.jinja}", "{pack: \"" + value + "\"}"))
    one_line(invoke("regenerate", "--config", config, "--goldens", tmp_path / "g"), "use llama.cpp:<file>.jinja")


def test_a_pack_vocab_name_cannot_climb_out(tmp_path):
    config = _one_model(tmp_path, tokenizer='{pack: "llama.cpp:../../x"}')
    one_line(invoke("regenerate", "--config", config, "--goldens", tmp_path / "g"), "llama.cpp vocab names are")


# 2 GB of 'x' folded fine on a machine with the memory, and its compile was then remembered in
# the shared cache: 2 TB cannot be made anywhere. 7 ** 300000000 is folded inside one C call, and
# Jinja's optimizer took the deadline's exception for "cannot fold" and computed it again.
@pytest.mark.parametrize("template", ["{{ 'x' * 2000000000000 }}", "{{ 2**100000000 }}", "{{ 7 ** 300000000 }}"])
@pytest.mark.slow
def test_a_template_that_blows_up_while_compiling_is_one_line(tmp_path, template):
    config = _one_model(tmp_path, template)
    done = subprocess.run([sys.executable, "-m", "generator.cli", "regenerate", "--config", str(config),
                           "--goldens", str(tmp_path / "g")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "GOLDENS_RENDER_DEADLINE": "5"})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("goldens: error: m: "), lines
    # Jinja gives up folding what it cannot build (memory), and the first render then runs out
    assert "the chat template (file:t.jinja) does not compile" in lines[0] or "ran out of memory" in lines[0], lines


def test_a_duplicate_key_on_one_line_is_refused(tmp_path):
    config = _one_model(tmp_path)
    config.write_text(config.read_text().replace(
        "shapes: {only: [plain]}", "shapes: {all_except: [], requests: [a/*.json], requests: [b/*.json]}"))
    one_line(invoke("models", "--config", config), "duplicate key 'requests'")


def test_a_model_cannot_take_the_index_name(tmp_path):
    config = _one_model(tmp_path)
    config.write_text(config.read_text().replace("\n  m:\n", "\n  regenerate.index:\n"))
    one_line(invoke("models", "--config", config), "'regenerate.index' is the name of a file or folder goldens keeps")
    config.write_text(config.read_text().replace("\n  regenerate.index:\n", "\n  causes:\n"))
    one_line(invoke("models", "--config", config), "'causes' is the name of a file or folder goldens keeps")


def test_bisect_jobs_are_bounded():
    line = one_line(invoke("bisect", "--engine", "llama-server", "--good", "9101", "--bad", "9247",
                           "--jobs", str(2**63 - 1)))
    assert "--jobs" in line


def test_regenerate_refuses_a_golden_check_could_not_read(tmp_path, monkeypatch):
    """An 18 MB request made a 91 MB golden that check then refused forever: the limits agree now."""
    from generator import files

    config = _one_model(tmp_path)
    config.write_text(config.read_text().replace("{only: [plain]}", "{only: [plain], requests: [big.json]}"))
    (tmp_path / "big.json").write_text(json.dumps({"messages": [{"role": "user", "content": "word " * 4000}]}))
    monkeypatch.setattr(files, "MAX_READ", 60_000)  # the same rule, at a size a test can afford
    line = one_line(invoke("regenerate", "--config", config, "--goldens", tmp_path / "g"),
                    "m/big: its golden would be", "nothing was written")
    assert "60,000" in line and not (tmp_path / "g" / "m").exists()


# ------------------------------------------------------ environment and I/O faults are not bugs

def _shell(command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


GOLDENS_CMD = f"{sys.executable} -m generator.cli"


@pytest.mark.parametrize("redirect, needle", [
    (">/dev/full", "goldens: error: cannot write the output (No space left on device)"),
    (">&-", "goldens: error: stdout is closed"),
])
def test_an_output_that_cannot_be_written_is_one_line_not_a_bug(redirect, needle):
    done = _shell(f"{GOLDENS_CMD} models {redirect}")
    assert done.returncode == 2 and needle in done.stderr, done.stderr
    assert "internal error" not in done.stderr and done.stderr.count("\n") == 1


def test_a_closed_stderr_still_gives_the_exit_code():
    assert _shell(f"{GOLDENS_CMD} models --config /nonexistent.yaml 2>&-").returncode == 2
    assert _shell(f"{GOLDENS_CMD} models 2>&- >/dev/null").returncode == 0


def test_a_cache_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    done = _shell(f"{GOLDENS_CMD} models --resolve >/dev/null",
                  env={"GOLDENS_CACHE": str(tmp_path / "file")})
    assert done.returncode == 2 and "(GOLDENS_CACHE) cannot be made" in done.stderr, done.stderr
    assert "internal error" not in done.stderr


@pytest.mark.parametrize("cache", ["proc", "file-in-the-way"])
def test_a_cache_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, cache):
    """Issue 44: a cache on a read-only filesystem was `internal error: OSError` (the build lock's
    folder could not be made). Root writes through permission bits, so the test makes the write
    fail as a read-only mount does, where nothing can be made."""
    if cache == "proc":
        monkeypatch.setenv("GOLDENS_CACHE", "/proc/self")
    else:
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / "pack").write_text("not a folder")
        monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path / "cache"))
    line = one_line(invoke("models", "--config", _one_model(tmp_path), "--resolve"), "cannot write here")
    assert "GOLDENS_CACHE names another folder" in line


@pytest.mark.parametrize("args, needle", [
    (["--shard", "1/99999999999999999999"], "N is at most 1000"),
    (["--timeout", "nan"], "'--timeout': 'nan'"),
    (["--request-timeout", "nan"], "'--request-timeout': 'nan'"),
    (["--timeout", "inf"], "'--timeout': 'inf'"),
])
def test_bounds_that_are_not_numbers_are_refused(args, needle):
    one_line(invoke("check", "--engine", "minijinja", "--model", "qwen3", *args), needle)


@pytest.mark.slow
def test_a_yaml_nested_thousands_deep_is_one_line(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text("models: " + "[" * 5000 + "]" * 5000 + "\n")
    one_line(invoke("models", "--config", config), "nested too deeply")


@pytest.mark.integration
def test_a_venv_marker_without_its_python_is_made_again(tmp_path, monkeypatch):
    from generator.servers import venv

    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))
    broken = tmp_path / "thing"
    broken.mkdir()
    (broken / venv.MARKER).write_text("ok\n")  # the marker, but no bin/python
    assert not venv.trusted(broken)
    made = []
    monkeypatch.setattr(venv, "_install", lambda path, steps, check, expect: made.append(path))
    venv.ensure("thing", lambda: [], "print('ok')", "ok")
    assert made == [broken]


def test_a_venv_whose_marker_records_another_check_answer_is_made_again(tmp_path, monkeypatch):
    """A venv made before its plan grew (transformers@V venvs before Pillow was added) has a
    marker with the old check answer: it is installed again, not trusted."""
    from generator.servers import venv

    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path))
    monkeypatch.delenv("GOLDENS_LIGHT", raising=False)  # the install below is a stand-in: nothing heavy runs
    old = tmp_path / "transformers-5.25.0"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "python").symlink_to(sys.executable)
    (old / venv.MARKER).write_text("5.25.0 in 2s (uv)\n")  # what the check printed before
    assert venv.trusted(old) and not venv.trusted(old, "5.25.0 13.0.0")
    assert not venv.trusted(old, "5.25")  # a prefix of the version is not the version
    made = []
    monkeypatch.setattr(venv, "_install", lambda path, steps, check, expect: made.append(path))
    venv.ensure("transformers-5.25.0", lambda: [], "print('5.25.0 13.0.0')", "5.25.0 13.0.0")
    assert made == [old]
    (old / venv.MARKER).write_text("5.25.0 13.0.0 in 2s (uv)\n")
    assert venv.trusted(old, "5.25.0 13.0.0")
    venv.ensure("transformers-5.25.0", lambda: [], "print('5.25.0 13.0.0')", "5.25.0 13.0.0")
    assert made == [old]  # current: used as it is


def test_a_dangling_report_link_makes_no_folders(tmp_path):
    link = tmp_path / "out.md"
    link.symlink_to(tmp_path / "nowhere" / "deep" / "out.md")
    one_line(invoke("check", "--engine", "minijinja", "--model", "qwen3", "--report", link),
             "whose folder does not exist")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("field", ["chat_template_kwargs", "tools", "tool_choice", "documents", "reasoning_effort",
                                   "response_format", "parallel_tool_calls"])
def test_a_null_field_is_taken_as_absent(field):
    """Issue 44: `chat_template_kwargs: null` was refused though every other null field is taken
    (vLLM takes it too); null is as good as absent, for every optional field alike."""
    from generator.config.request import validate_request

    absent = validate_request({"messages": [{"role": "user", "content": "hi"}]}, "r.json")
    request = validate_request({"messages": [{"role": "user", "content": "hi"}], field: None}, "r.json")
    assert request["chat_template_kwargs"] == absent["chat_template_kwargs"] == {}
    assert request.get(field) in (None, {})


@pytest.mark.parametrize("shapes", ["{only: []}", "[]", "{all_except: [" + ", ".join(
    __import__("generator.config.shapes", fromlist=["SHAPES"]).SHAPES) + "]}"])
def test_a_model_with_no_shape_left_is_refused(tmp_path, shapes):
    """Issue 44: `shapes: {only: []}` regenerated nothing with exit 0, then check exited 2 with
    no line: a model of no case is a config error, said once."""
    config = _one_model(tmp_path)
    config.write_text(config.read_text().replace("{only: [plain]}", shapes))
    one_line(invoke("regenerate", "--config", config, "--goldens", tmp_path / "g"), "no shape is left")
    assert not (tmp_path / "g").exists()


def test_what_a_plugin_engine_says_comes_back_without_the_secrets():
    """A plugin is handed the configured headers: its errors, refusals, prompt and version are
    redacted as a server's replies are, and it keeps its own type for the judge."""
    from generator import redaction
    from generator.engines import EngineError, Ids, Refused
    from generator.engines.pool import _Redacting

    redaction.register("k9")

    class Plugin:
        name = "mine"

        def ids(self, request):
            if request.get("refuse"):
                raise Refused(f"server said: bad key\\nk9 for {request['refuse']}")
            if request.get("fail"):
                raise EngineError("down: k9")
            return Ids([1, 2], prompt="a\tk9b")

        def version(self):
            return "1.0+k9"

        def close(self):
            pass

    engine = _Redacting(Plugin(), redaction.redact)
    with pytest.raises(Refused) as refused:
        engine.ids({"refuse": "qwen3/plain"})
    assert str(refused.value) == "server said: bad key\\n[redacted] for qwen3/plain"
    with pytest.raises(EngineError, match=r"down: \[redacted\]"):
        engine.ids({"fail": True})
    got = engine.ids({})
    assert list(got) == [1, 2] and got.prompt == "a\t[redacted]b" and engine.version() == "1.0+[redacted]"
