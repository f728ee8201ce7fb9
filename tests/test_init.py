"""`goldens init`: a commented models.yaml for the models named, the .gitignore lines and a caller
of the reusable workflow; then `goldens regenerate` works with nothing edited. Nothing that
exists is replaced."""

from __future__ import annotations

import re
import shutil
import types
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import CONFIG, one_line_error, source_of
from test_workflow import REUSABLE, load, validate

from generator import init
from generator.cli import main
from generator.config import engine_registry, models
from generator.goldens import golden_file


def run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


@pytest.fixture
def team(tmp_path) -> Path:
    """An empty repository folder holding a copy of Qwen3's tokenizer files (from the pack)."""
    repo = tmp_path / "team"
    shutil.copytree(source_of("qwen3").tokenizer_dir, repo / "tokenizers" / "qwen3")
    return repo


def files_in(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_init_then_regenerate_with_nothing_edited(team):
    result = run("init", team, "--dir", team / "tokenizers" / "qwen3")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"wrote {team / 'models.yaml'} (1 model: qwen3)"
    config = models.load(team / "models.yaml")
    assert config.models["qwen3"].tokenizer.value == "tokenizers/qwen3"  # relative to models.yaml
    assert config.models["qwen3"].engines == engine_registry.starters()  # the registry's starters
    assert config.engine_versions == CONFIG.engine_versions  # the pins this release was tested with
    text = (team / "models.yaml").read_text(encoding="utf-8")
    assert "# template: {file: templates/override.jinja}" in text  # commented, for the next edit
    assert (team / ".gitignore").read_text(encoding="utf-8").splitlines()[1:] == [
        "/out/", "/.goldens-cache/", ".*.tmp", ".*.lock", "/.venv/"]
    # every path the first pull request must carry, the tokenizer folder models.yaml names included
    assert result.stdout.splitlines()[-1] == (
        "next: goldens regenerate, then commit models.yaml, models.capabilities.lock, goldens, .gitignore, .github, tokenizers/qwen3 "
        "(git add models.yaml models.capabilities.lock goldens .gitignore .github tokenizers/qwen3)")

    result = run("regenerate", "--config", team / "models.yaml", "--goldens", team / "goldens")
    assert result.exit_code == 0, result.output
    written = len(config.models["qwen3"].shapes)
    assert result.stdout.splitlines()[-1] == f"{written} written, 0 unchanged, 0 removed"
    # the same tokenizer as the built-in qwen3: the same ids for the same request
    ours = golden_file.read(team / "goldens" / "qwen3" / "plain.json")
    builtin = golden_file.read(golden_file.golden_path(Path(CONFIG.path).parent / "goldens", "qwen3/plain"))
    assert ours.ids == builtin.ids and builtin.outcome == "ok" and ours.ids

    result = run("check", "--config", team / "models.yaml", "--goldens", team / "goldens", "--engine", "minijinja")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == f"{written} checked: {written} rendered and match, 0 both refuse, 0 known divergence, 0 drift, 0 error"


def test_the_written_workflow_calls_the_reusable_one_with_its_inputs(team):
    assert run("init", team, "--dir", team / "tokenizers" / "qwen3", "--hf", "Qwen/Qwen3-8B@abc123").exit_code == 0
    path = team / ".github" / "workflows" / "goldens.yml"
    result = validate(path)
    assert result.returncode == 0, result.stdout + result.stderr
    (job,) = load(path)["jobs"].values()
    version = __import__("importlib.metadata").metadata.version("goldens")
    assert job["uses"] == f"{init.REPOSITORY}/{init.REUSABLE_WORKFLOW}@v{version}"
    inputs = load(REUSABLE)["on"]["workflow_call"]["inputs"]
    assert set(job["with"]) <= set(inputs) and job["with"]["config"] == "models.yaml"
    assert job["with"]["package"] == f"goldens @ git+https://github.com/{init.REPOSITORY}@v{version}"
    hf = models.load(team / "models.yaml").models["qwen3-8b"].tokenizer
    assert (hf.kind, hf.value, hf.revision) == ("hf", "Qwen/Qwen3-8B", "abc123")


@pytest.mark.parametrize("default", ["main", "master", "trunk"])
def test_the_written_workflow_gates_pushes_to_the_default_branch_whatever_its_name(team, default):
    """`git init` made `master` for the issue's team and the workflow ran on `main` only: pushes
    are filtered by the repository's default branch as GitHub reports it, not a list written at
    init, and every pull request runs."""
    assert run("init", team, "--dir", team / "tokenizers" / "qwen3").exit_code == 0
    data = load(team / ".github" / "workflows" / "goldens.yml")
    assert data["on"]["push"] is None and data["on"]["pull_request"] is None  # no branch list to miss
    (job,) = data["jobs"].values()
    condition = re.fullmatch(r"\$\{\{(.*)\}\}", job["if"].strip())[1]
    # GitHub's expression, read as Python: the operators it uses here and the context it reads
    python = condition.replace("||", " or ").replace("&&", " and ").replace("!", " not ").replace(" not =", "!=")
    assert set(re.findall(r"[a-z_.]+", python)) - {"or", "and", "not"} <= {
        "github.event_name", "push", "github.ref_name", "github.event.repository.default_branch"}, condition

    def runs(event: str, branch: str) -> bool:
        github = types.SimpleNamespace(event_name=event, ref_name=branch, event=types.SimpleNamespace(
            repository=types.SimpleNamespace(default_branch=default)))
        return eval(python, {"github": github})  # noqa: S307 (the expression the test just read)

    assert runs("push", default) and not runs("push", "feature") and not runs("push", f"{default}-old")
    assert runs("pull_request", "feature") and runs("workflow_dispatch", default)


def test_existing_files_are_never_replaced(team):
    (team / "models.yaml").write_text("mine\n", encoding="utf-8")
    before = files_in(team)
    message = one_line_error(run("init", team, "--dir", team / "tokenizers" / "qwen3"))
    assert message == (f"goldens: error: {team / 'models.yaml'}: already exists; goldens init writes only "
                       "new files (nothing written)")
    assert files_in(team) == before

    (team / "models.yaml").unlink()
    workflow = team / ".github" / "workflows" / "goldens.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text("on: push\n", encoding="utf-8")
    before = files_in(team)
    assert "already exists" in one_line_error(run("init", team, "--dir", team / "tokenizers" / "qwen3"))
    assert files_in(team) == before


def test_an_existing_gitignore_gains_only_the_lines_it_lacks(team):
    (team / ".gitignore").write_text("node_modules/\n/out/", encoding="utf-8")
    result = run("init", team, "--dir", team / "tokenizers" / "qwen3")
    assert result.exit_code == 0, result.output
    assert f"added to {team / '.gitignore'}: /.goldens-cache/, .*.tmp, .*.lock, /.venv/" in result.stdout
    lines = (team / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["node_modules/", "/out/"] and lines.count("/out/") == 1
    assert lines[3:] == ["/.goldens-cache/", ".*.tmp", ".*.lock", "/.venv/"]


@pytest.mark.parametrize(("args", "message"), [
    ((), "name at least one model: --hf org/name@revision, --gguf PATH or --dir PATH"),
    (("--hf", "Qwen/Qwen3-8B"), "--hf Qwen/Qwen3-8B: expected org/name@revision (a pinned commit or tag)"),
    (("--gguf", "missing.gguf"), "--gguf missing.gguf: not a file"),
    (("--dir", "nowhere"), "--dir nowhere: not a directory"),
    (("--dir", "."), "--dir .: holds neither tokenizer.json nor tokenizer_config.json"),
    (("--dir", "tokenizers/qwen3", "--engine", "nope"), "--engine: unknown engine 'nope'"),
    (("--dir", "tokenizers/qwen3", "--repository", "goldens"), "--repository goldens: expected OWNER/NAME or "
                                                                "OWNER/NAME@REF"),
    (("--dir", "tokenizers/qwen3", "--repository", "a/b@x y"), "--repository a/b@x y: expected"),
])
def test_bad_input_is_one_line_and_writes_nothing(team, monkeypatch, args, message):
    monkeypatch.chdir(team)
    before = files_in(team)
    line = one_line_error(run("init", *args))
    assert line.startswith(f"goldens: error: {message}"), line
    assert files_in(team) == before


def test_a_gguf_source_is_named_after_its_file(team, tmp_path, monkeypatch):
    from generator.sources.gguf import llama_cpp_vocab

    gguf = team / "models" / "ggml-vocab-command-r.gguf"
    gguf.parent.mkdir()
    shutil.copy(llama_cpp_vocab("command-r"), gguf)
    outside = tmp_path / "tok-elsewhere"
    shutil.copytree(team / "tokenizers" / "qwen3", outside)
    monkeypatch.setenv("GOLDENS_ALLOW_PATHS", str(outside))  # a folder outside that the user allows
    assert run("init", team, "--gguf", gguf, "--dir", outside, "--dir", team / "tokenizers" / "qwen3").exit_code == 0
    config = models.load(team / "models.yaml")
    assert {name: (m.tokenizer.kind, m.tokenizer.value) for name, m in config.models.items()} == {
        "command-r": ("gguf", "models/ggml-vocab-command-r.gguf"),
        "tok-elsewhere": ("dir", str(outside)),  # outside the repository: absolute
        "qwen3": ("dir", "tokenizers/qwen3"),
    }


def test_the_shipped_example_is_a_valid_matrix(tmp_path):
    text = init.example()
    config = models.parse(yaml.safe_load(text), tmp_path / "models.yaml")
    spec = config.models["my-model"]
    assert (spec.tokenizer.kind, spec.engines) == ("hf", engine_registry.starters())  # runs anywhere, no server
    assert set(spec.variants) == {"", "thinking-off"} and "image" not in spec.shapes


def test_the_goldens_folder_is_goldens_on_every_command():
    """One name for the option everywhere; regenerate's old --out still works, unlisted."""
    for name, command in main.commands.items():
        folder = [p for p in command.params if p.name in ("root", "out", "old_out")]
        if not folder:
            continue
        shown = [opt for p in folder if not getattr(p, "hidden", False) for opt in p.opts]
        assert shown == ["--goldens"], (name, shown)
    assert "--out" not in CliRunner().invoke(main, ["regenerate", "--help"]).stdout
    hidden = [p for p in main.commands["regenerate"].params if p.name == "old_out"]
    assert hidden[0].opts == ["--out"] and hidden[0].hidden


def test_a_gitignore_that_is_not_a_file_stops_init_before_anything_is_written(team):
    (team / ".gitignore").mkdir()
    before = files_in(team)
    line = one_line_error(run("init", team, "--dir", team / "tokenizers" / "qwen3"))
    assert line == f"goldens: error: {team / '.gitignore'}: not a regular file (nothing written)"
    assert files_in(team) == before and not (team / "models.yaml").exists()


def test_a_github_file_in_the_way_writes_nothing_and_a_second_init_works(team):
    (team / ".github").write_text("not a folder\n")
    before = files_in(team)
    line = one_line_error(run("init", team, "--dir", team / "tokenizers" / "qwen3"))
    assert line == f"goldens: error: {team / '.github'}: not a directory (nothing written)"
    assert files_in(team) == before
    (team / ".github").unlink()
    assert run("init", team, "--dir", team / "tokenizers" / "qwen3").exit_code == 0
    assert (team / "models.yaml").is_file() and (team / ".github" / "workflows" / "goldens.yml").is_file()


def test_a_write_that_fails_midway_takes_back_what_init_wrote(team, monkeypatch):
    (team / ".gitignore").write_text("build/\n")
    before = files_in(team)
    real = init.files.atomic_write

    def full_disk(path, data, **kwargs):
        if Path(path).name == ".gitignore":
            raise OSError(28, "No space left on device", str(path))
        return real(path, data, **kwargs)

    monkeypatch.setattr(init.files, "atomic_write", full_disk)
    line = one_line_error(run("init", team, "--dir", team / "tokenizers" / "qwen3"))
    assert line == f"goldens: error: {team / '.gitignore'}: No space left on device (nothing written)"
    assert files_in(team) == before and not (team / ".github").exists()


@pytest.mark.parametrize(("given", "repository", "ref"), [
    ("acme/goldens-fork@v0.1.0-acme.2", "acme/goldens-fork", "v0.1.0-acme.2"),
    ("acme/goldens", "acme/goldens", None),  # the release's tag
])
def test_repository_names_where_the_workflow_comes_from(team, given, repository, ref):
    result = run("init", team, "--dir", team / "tokenizers" / "qwen3", "--repository", given)
    assert result.exit_code == 0, result.output
    ref = ref or f"v{__import__('importlib.metadata').metadata.version('goldens')}"
    path = team / ".github" / "workflows" / "goldens.yml"
    (job,) = load(path)["jobs"].values()
    assert job["uses"] == f"{repository}/{init.REUSABLE_WORKFLOW}@{ref}"
    assert job["with"]["package"] == f"goldens @ git+https://github.com/{repository}@{ref}"
    assert init.REPOSITORY not in path.read_text(encoding="utf-8")
    assert validate(path).returncode == 0


def test_the_next_line_names_each_local_source_and_warns_of_one_outside(team, tmp_path, monkeypatch):
    from generator.sources.gguf import llama_cpp_vocab

    (team / "models").mkdir()
    shutil.copy(llama_cpp_vocab("command-r"), team / "models" / "command-r.gguf")
    outside = tmp_path / "elsewhere"
    shutil.copytree(team / "tokenizers" / "qwen3", outside)
    monkeypatch.setenv("GOLDENS_ALLOW_PATHS", str(outside))
    result = run("init", team, "--gguf", team / "models" / "command-r.gguf", "--dir", team / "tokenizers" / "qwen3",
                 "--dir", outside, "--hf", "Qwen/Qwen3-8B@abc123")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "next: goldens regenerate, then commit models.yaml, models.capabilities.lock, goldens, .gitignore, .github, models/command-r.gguf, "
        "tokenizers/qwen3 (git add models.yaml models.capabilities.lock goldens .gitignore .github models/command-r.gguf tokenizers/qwen3); "
        f"{outside} lies outside the repository, where CI cannot read it: move it in, or name the model with --hf")


@pytest.mark.parametrize("how", ["--dir", "--gguf"])
def test_a_source_outside_the_repository_is_refused_before_anything_is_written(team, tmp_path, how):
    """Issue 44: `init --dir` with a folder outside the repository wrote a models.yaml that the
    next step, `goldens regenerate`, refused (files.config_path's rule): said now, nothing written."""
    from generator.sources.gguf import llama_cpp_vocab

    outside = tmp_path / "elsewhere"
    shutil.copytree(team / "tokenizers" / "qwen3", outside)
    shutil.copy(llama_cpp_vocab("command-r"), outside / "command-r.gguf")
    before = files_in(team)
    line = one_line_error(run("init", team, how, outside if how == "--dir" else outside / "command-r.gguf"))
    assert f"outside {team.resolve()}" in line and "--hf" in line, line
    assert files_in(team) == before


@pytest.mark.parametrize("name", ["tok\nnewline", 'tok "quoted" \\ back', "tok: colon # hash", "tök ünï"])
def test_a_source_path_reads_back_exactly_whatever_its_characters(team, name):
    """A newline in --dir was folded to a space by the quoting: the path must read back as given."""
    shutil.copytree(team / "tokenizers" / "qwen3", team / "tokenizers" / name)
    result = run("init", team, "--dir", team / "tokenizers" / name)
    assert result.exit_code == 0, result.output
    (model,) = models.load(team / "models.yaml").models.values()
    assert model.tokenizer.value == f"tokenizers/{name}"
    from generator.errors import printable

    last = result.stdout.splitlines()[-1]  # the next line stays one line, the path shown escaped
    assert last.startswith("next: ") and printable(f"tokenizers/{name}") in last, last
