"""The goldens pytest plugin in a team's own suite: `pytest --goldens` runs one test per case per
engine of its models.yaml (and the reference's own), judged as `goldens check` judges, and
`--snapshot-update` writes the bytes `goldens regenerate` writes. Each run is a real pytest
process in a folder outside this checkout, finding the plugin through its entry point."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import source_of, tier

from generator.cli import main

SHAPES = ["plain", "tools", "multi-turn"]


def pytest_in(directory: Path, *args: str, cache: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    options = [] if cache else ["-p", "no:cacheprovider"]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *options, "-rA", *args],
                          cwd=directory, capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
@tier(pytest.mark.slow)  # a matrix regenerated, then pytest in its own process on it
def made(tmp_path_factory) -> Path:
    """A team folder: Qwen3's tokenizer files, a models.yaml of three shapes, its goldens."""
    repo = tmp_path_factory.mktemp("plugin") / "team"
    shutil.copytree(source_of("qwen3").tokenizer_dir, repo / "tok")
    matrix = {"date": "2026-01-15", "models": {"q": {
        "tokenizer": {"dir": "tok"}, "shapes": SHAPES, "engines": ["transformers", "minijinja"]}}}
    (repo / "models.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    result = CliRunner().invoke(main, ["regenerate", "--config", str(repo / "models.yaml"),
                                       "--goldens", str(repo / "goldens")])
    assert result.exit_code == 0, result.output
    return repo


@pytest.fixture
def team(made, tmp_path) -> Path:
    repo = tmp_path / "team"
    shutil.copytree(made, repo)
    return repo


def passed(result) -> list[str]:
    return sorted(line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith("PASSED "))


def test_one_test_per_case_per_engine_and_the_reference(team):
    result = pytest_in(team, "--goldens", "-v")  # -v undoes -q: the header says what was collected
    assert result.returncode == 0, result.stdout + result.stderr
    # and what `goldens check` judges beyond the cases: the reference's invariant findings, and
    # each (model, engine) group judged whole (stale causes, an engine refusing every case)
    assert f"collected {3 * len(SHAPES) + 3} items" in result.stdout  # counted as collected, not added after
    assert passed(result) == sorted([f"models.yaml::q/{shape}[{engine}]" for shape in SHAPES
                                     for engine in ("reference", "transformers", "minijinja")]
                                    + ["models.yaml::q[invariants]", "models.yaml::q[transformers group]",
                                       "models.yaml::q[minijinja group]"])


def test_a_moved_token_fails_each_engine_with_its_first_divergence(team):
    path = team / "goldens" / "q" / "plain.json"
    path.write_text(path.read_text(encoding="utf-8").replace('[8948, "system"]', '[8949, "system"]', 1),
                    encoding="utf-8")
    result = pytest_in(team, "--goldens", "--goldens-engine", "minijinja")
    assert result.returncode == 1, result.stdout + result.stderr
    failed = sorted(line.split(" ")[1] for line in result.stdout.splitlines() if line.startswith("FAILED "))
    assert failed == ["models.yaml::q/plain[minijinja]", "models.yaml::q/plain[reference]"]
    assert "drift at token 1 (25 vs 25 tokens)" in result.stdout
    assert "  minijinja 0:151644:'<|im_start|>' »1:8948:'system'" in result.stdout
    assert "Traceback" not in result.stdout
    assert len(passed(result)) == 2 * len(SHAPES) - 2 + 2  # transformers not chosen: reference + minijinja,
    # the invariants and the minijinja group


def test_snapshot_update_writes_what_regenerate_writes(team, made):
    goldens = team / "goldens" / "q"
    (goldens / "tools.json").unlink()
    (goldens / "plain.json").write_text("{}", encoding="utf-8")
    result = pytest_in(team, "--goldens", "--snapshot-update", "-k", "reference")
    assert result.returncode == 0, result.stdout + result.stderr
    for shape in SHAPES:
        assert (goldens / f"{shape}.json").read_bytes() == (made / "goldens" / "q" / f"{shape}.json").read_bytes()
    result = CliRunner().invoke(main, ["regenerate", "--config", str(team / "models.yaml"),
                                       "--goldens", str(team / "goldens"), "--force"])
    assert result.stdout.splitlines()[-1] == f"0 written, {len(SHAPES)} unchanged, 0 removed"


def test_a_missing_golden_says_how_to_make_it(team):
    (team / "goldens" / "q" / "tools.json").unlink()
    result = pytest_in(team, "--goldens", "-k", "tools")
    assert result.returncode == 1
    assert "goldens/q/tools.json: no golden; run `goldens regenerate`" in result.stdout


def test_a_bad_matrix_is_one_line(team):
    (team / "models.yaml").write_text("models: {q: {tokenizer: {dir: tok}, engines: [nope]}}\n", encoding="utf-8")
    result = pytest_in(team, "--goldens")
    assert result.returncode == 4, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert errors == ["ERROR: goldens: error: models.yaml: models.q.engines[0]: unknown engine 'nope' "
                      f"(known: {errors[0].split('(known: ')[1]}"], errors


@pytest.mark.parametrize("option, needle", [
    (["--goldens-engine", "minijinja@99.0.0"], "minijinja@99.0.0"),
    (["--goldens-dir", "/nonexistent"], "--goldens-dir /nonexistent: does not exist"),
    (["--goldens-dir", "models.yaml"], "is not a folder"),
    (["--goldens-durations", "."], "is a directory, not a report file"),
    (["--goldens-durations", "/proc/durations.json"], "/proc/durations.json"),
])
def test_a_bad_option_is_one_usage_error_before_any_test(team, option, needle):
    """Issue 44: `transformers@99.0.0` was 20 test errors, `--goldens-dir /nonexistent` 40
    failures, `--goldens-durations DIR` a traceback after every test had passed."""
    result = pytest_in(team, "--goldens", *option)
    assert result.returncode == 4, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: goldens: error: "), errors
    assert needle in errors[0], errors
    assert "Traceback" not in result.stdout + result.stderr and "passed" not in result.stdout


def test_without_the_flag_the_plugin_only_lends_its_fixtures(tmp_path):
    """No goldens, no tokenizer read: without --goldens the plugin only reads the matrix."""
    matrix = {"date": "2026-01-15", "models": {"q": {
        "tokenizer": {"dir": "tok"}, "shapes": SHAPES, "engines": ["transformers", "minijinja"]}}}
    (tmp_path / "models.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    (tmp_path / "test_mine.py").write_text(
        "def test_matrix(goldens_config):\n"
        "    assert list(goldens_config.models) == ['q']\n", encoding="utf-8")
    result = pytest_in(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert passed(result) == ["test_mine.py::test_matrix"]


def test_one_models_vllm_tests_run_together(tmp_path):
    """The `server` marker: each model's vLLM tests are moved together (first appearance keeps
    its place, other tests keep file order), so that server starts once and stops after them."""
    (tmp_path / "test_order.py").write_text(
        "import pytest\n"
        "ORDER = []\n"
        "@pytest.mark.server('vllm', 'a')\ndef test_a1(): ORDER.append('a1')\n"
        "@pytest.mark.server('vllm', 'b')\ndef test_b1(): ORDER.append('b1')\n"
        "def test_plain(): ORDER.append('plain')\n"
        "@pytest.mark.server('vllm', 'a')\ndef test_a2(): ORDER.append('a2')\n"
        "@pytest.mark.server('llama-server', 'a')\ndef test_l(): ORDER.append('l')\n"
        "@pytest.mark.server('vllm', 'b')\ndef test_b2(): ORDER.append('b2')\n"
        "def test_last(): assert ORDER == ['a1', 'a2', 'b1', 'b2', 'plain', 'l']\n", encoding="utf-8")
    result = pytest_in(tmp_path, "--strict-markers")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [name.split("::")[1] for name in passed(result)] == sorted(
        ["test_a1", "test_a2", "test_b1", "test_b2", "test_plain", "test_l", "test_last"])


def failed(result) -> list[str]:
    return sorted(line.split(" ")[1] for line in result.stdout.splitlines() if line.startswith("FAILED "))


def move_a_token(team: Path) -> None:
    path = team / "goldens" / "q" / "plain.json"
    path.write_text(path.read_text(encoding="utf-8").replace('[8948, "system"]', '[8949, "system"]', 1),
                    encoding="utf-8")


def test_a_printed_node_id_passed_back_selects_its_test(team):
    result = pytest_in(team, "--goldens", "models.yaml::q/tools[minijinja]", "models.yaml::q/plain[reference]", "-v")
    assert result.returncode == 0, result.stdout + result.stderr
    assert passed(result) == ["models.yaml::q/plain[reference]", "models.yaml::q/tools[minijinja]"]
    assert "collected 2 items" in result.stdout


def test_last_failed_reruns_only_the_failures_and_failed_first_orders_them(team):
    move_a_token(team)
    first = pytest_in(team, "--goldens", cache=True)
    assert first.returncode == 1 and failed(first) == ["models.yaml::q/plain[minijinja]",
                                                       "models.yaml::q/plain[reference]",
                                                       "models.yaml::q/plain[transformers]"], first.stdout
    again = pytest_in(team, "--goldens", "--lf", "-v", cache=True)
    assert again.returncode == 1, again.stdout
    assert failed(again) == failed(first) and passed(again) == []
    assert "run-last-failure: rerun previous 3 failures" in again.stdout
    ordered = pytest_in(team, "--goldens", "--ff", "-vv", cache=True)
    run = [line.split(" ")[0] for line in ordered.stdout.splitlines() if line.startswith("models.yaml::")]
    assert sorted(run[:3]) == failed(first) and len(run) == 3 * len(SHAPES) + 3, ordered.stdout


@pytest.mark.parametrize("flag", ["--snapshot-update", "--force-regen"])
def test_an_update_does_what_regenerate_does_and_says_it(team, made, flag):
    """Written, unchanged, removed (an orphan of a shape no longer listed), the index recorded:
    the next `goldens regenerate` renders nothing and writes nothing."""
    matrix = yaml.safe_load((team / "models.yaml").read_text(encoding="utf-8"))
    matrix["models"]["q"]["shapes"] = ["plain", "multi-turn"]
    (team / "models.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    move_a_token(team)
    result = pytest_in(team, "--goldens", flag)
    assert result.returncode == 0, result.stdout + result.stderr
    index = team / "goldens" / "regenerate.index"
    assert f"removed {team / 'goldens' / 'q' / 'tools.json'} (golden)" in result.stdout.splitlines()
    assert f"goldens: 1 written, 1 unchanged, 1 removed; {index} updated" in result.stdout.splitlines()
    assert not (team / "goldens" / "q" / "tools.json").exists()
    assert (team / "goldens" / "q" / "plain.json").read_bytes() == (made / "goldens" / "q" / "plain.json").read_bytes()
    recorded = index.read_bytes()
    from generator.goldens import index as index_module

    assert index_module.load(team / "goldens").fresh(  # the next regenerate skips the model
        "q", index_module.loads(recorded.decode()).models["q"].inputs, ["q/plain", "q/multi-turn"], team / "goldens")
    result = CliRunner().invoke(main, ["regenerate", "--config", str(team / "models.yaml"),
                                       "--goldens", str(team / "goldens")])
    assert result.stdout.splitlines()[-1] == "0 written, 2 unchanged, 0 removed"
    assert index.read_bytes() == recorded
    forced = CliRunner().invoke(main, ["regenerate", "--config", str(team / "models.yaml"),
                                       "--goldens", str(team / "goldens"), "--force"])
    assert forced.stdout.splitlines()[-1] == "0 written, 2 unchanged, 0 removed"
    assert index.read_bytes() == recorded  # the same line regenerate records


def test_stale_goldens_are_one_error_naming_the_fix_not_failures(team):
    import json

    path = team / "tok" / "tokenizer_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["chat_template"] = data["chat_template"].replace("<|im_start|>system\\n", "<|im_start|>system\\nEdited. ")
    path.write_text(json.dumps(data), encoding="utf-8")
    result = pytest_in(team, "--goldens")
    assert result.returncode == 2, result.stdout + result.stderr
    assert failed(result) == [] and passed(result) == []
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("goldens: error: q: ")]
    assert line.startswith(f"goldens: error: q: {len(SHAPES)} goldens are stale: rendered from template sha256 ")
    assert line.endswith("; run `goldens regenerate` (then review `goldens diff`)")
    fixed = pytest_in(team, "--goldens", "--snapshot-update")  # the update is the fix
    assert fixed.returncode == 0 and f"goldens: {len(SHAPES)} written, 0 unchanged" in fixed.stdout
    assert pytest_in(team, "--goldens").returncode == 0


def test_a_durations_file_spreads_the_shared_setup_for_pytest_split(team):
    """The first test of a model carries its tokenizer load, of an engine its start, in its setup
    phase; the durations file gives each test sharing that setup an equal part of it, so a
    splitter sees each test's cost where it runs, not one heavy first test."""
    import json

    (team / "durations.json").write_text('{"tests/test_mine.py::test_kept": 1.5}\n', encoding="utf-8")
    result = pytest_in(team, "--goldens", "--goldens-durations", "durations.json", "--durations=0", "-vv")
    assert result.returncode == 0, result.stdout + result.stderr
    durations = json.loads((team / "durations.json").read_text(encoding="utf-8"))
    ids = [f"models.yaml::q/{shape}[{engine}]" for shape in SHAPES for engine in ("reference", "transformers", "minijinja")]
    ids += ["models.yaml::q[invariants]", "models.yaml::q[transformers group]", "models.yaml::q[minijinja group]"]
    assert sorted(durations) == sorted([*ids, "tests/test_mine.py::test_kept"]) and durations["tests/test_mine.py::test_kept"] == 1.5
    setups = {line.split()[-1]: float(line.split()[0][:-1]) for line in result.stdout.splitlines()
              if re.match(r"^\d+\.\d+s setup ", line)}
    first = "models.yaml::q/plain[reference]"  # loads the tokenizer: the biggest setup
    assert setups.get(first, 0) > 0.2, result.stdout
    for engine in ("reference", "transformers", "minijinja"):
        group = [durations[f"models.yaml::q/{shape}[{engine}]"] for shape in SHAPES]
        assert max(group) < 4 * min(group), (engine, group)


@pytest.mark.slow
def test_an_engine_cause_goldens_ships_shows_as_known_on_a_teams_model_as_check_says_it(tmp_path):
    """Llama 3.1's template on a team's own model: minijinja renders tool-call arguments sent as
    JSON text as text, which goldens ships reviewed as an engine-level cause. pytest --goldens
    passes those cases as check does and says, as check says it, which cause explained them,
    its class and why; `gate:` on that class fails both alike (issue 42 item 2)."""
    from generator.replay.judging import causes

    team = tmp_path / "team"
    shutil.copytree(source_of("llama3").tokenizer_dir, team / "tok")
    (team / "tok" / "chat_template.jinja").write_text(source_of("llama3").template, encoding="utf-8")
    matrix = {"date": "2026-01-15", "models": {"acme": {
        "tokenizer": {"dir": "tok"}, "shapes": ["plain", "tool-result-json-args"],
        "kwargs": {"date_string": "15 Jan 2026"}, "engines": ["transformers", "minijinja"]}}}
    (team / "models.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    made = CliRunner().invoke(main, ["regenerate", "--config", str(team / "models.yaml"),
                                     "--goldens", str(team / "goldens")])
    assert made.exit_code == 0, made.output
    cause = causes.named(team / "goldens", "minijinja-renders-as-sent")
    assert cause is not None and cause.builtin  # shipped with goldens, not in the team's goldens/
    check = CliRunner().invoke(main, ["check", "--config", str(team / "models.yaml"), "--goldens",
                                      str(team / "goldens")])
    assert check.exit_code == 0, check.output
    said = [line for line in check.stdout.splitlines() if line.startswith(("known [", "  ", "known divergences"))]
    assert said[0] == "known [minijinja]: the reviewed cause minijinja-renders-as-sent explained 1 case"
    assert said[1].startswith(f"  {cause.klass}: {cause.reason.split('. ')[0][:200]}")
    result = pytest_in(team, "--goldens")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = [line.removeprefix("goldens: ") for line in result.stdout.splitlines()
               if line.startswith(("goldens: known", "goldens:   "))]
    assert summary == said  # the same lines, the same judgement

    gated = {**matrix, "gate": [cause.klass]}
    (team / "models.yaml").write_text(yaml.safe_dump(gated, sort_keys=False), encoding="utf-8")
    assert CliRunner().invoke(main, ["check", "--config", str(team / "models.yaml"), "--goldens",
                                     str(team / "goldens")]).exit_code == 1
    failing = pytest_in(team, "--goldens")
    assert failing.returncode == 1 and failed(failing) == ["models.yaml::acme/tool-result-json-args[minijinja]"]
