"""`goldens diff [REV]`: changed goldens against git, token by token, in a tmp git repository."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import GOLDENS, one_line_error

from generator import files
from generator.cli import main
from generator.goldens import alignment, diff, golden_file

GIT = ["git", "-c", "user.name=goldens tests", "-c", "user.email=tests@example.invalid",
       "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def run_diff(repo: Path, *args) -> str:
    result = invoke("diff", "--goldens", repo / "goldens", *args)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository whose first commit holds a copy of the committed qwen3 goldens."""
    shutil.copytree(GOLDENS / "qwen3", tmp_path / "goldens" / "qwen3")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "goldens")
    return tmp_path


def edit(repo: Path, case: str, change) -> golden_file.Golden:
    path = golden_file.golden_path(repo / "goldens", case)
    item = golden_file.read(path)
    change(item)
    files.atomic_write(path, golden_file.dumps(item))
    return item


def change_token(item):
    item.ids[5], item.pieces[5] = 12345, " tersely"
    item.prompt = item.prompt.replace("You are terse.", "You are tersely.")


def remove_tokens(item):
    del item.ids[106:115], item.pieces[106:115]
    item.prompt = "".join(item.pieces)


def rows(text: str, mark: str) -> list[tuple[int, int, str]]:
    """(position, id, piece repr) of the rows with this mark (`-`, `+` or ` `)."""
    pattern = re.compile(rf"^  {re.escape(mark)} +(\d+) +(\d+) ('.*'|\".*\")$")
    return [(int(m[1]), int(m[2]), m[3]) for line in text.splitlines() if (m := pattern.match(line))]


def test_nothing_changed(repo):
    assert run_diff(repo) == "no golden changed against HEAD\n"


def test_one_edited_token_is_shown_aligned_with_its_context(repo):
    old = golden_file.read(golden_file.golden_path(repo / "goldens", "qwen3/plain"))
    edit(repo, "qwen3/plain", change_token)
    out = run_diff(repo)
    assert out.splitlines()[0] == "qwen3/plain: 1 token changed at 5"
    assert rows(out, "-") == [(5, 50537, "' terse'")]
    assert rows(out, "+") == [(5, 12345, "' tersely'")]
    assert [pos for pos, _, _ in rows(out, " ")] == [2, 3, 4, 6, 7, 8]
    assert [tid for _, tid, _ in rows(out, " ")] == [old.ids[i] for i in (2, 3, 4, 6, 7, 8)]
    assert "  @@ old 2-8, new 2-8 @@" in out
    assert "  @@ text at character 32: 2 characters added @@" in out
    assert "'ly'" in out.split("@@ text")[1]
    assert out.rstrip().endswith("1 golden changed against HEAD")


def test_removed_tokens_new_and_removed_goldens(repo):
    before = golden_file.read(golden_file.golden_path(repo / "goldens", "qwen3/tools"))
    edit(repo, "qwen3/tools", remove_tokens)
    added = golden_file.read(golden_file.golden_path(repo / "goldens", "qwen3/plain"))
    added.case = "qwen3/brand-new"
    files.atomic_write(repo / "goldens" / "qwen3" / "brand-new.json", golden_file.dumps(added))
    (repo / "goldens" / "qwen3" / "whitespace.json").unlink()

    out = run_diff(repo)
    summaries = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert summaries == [
        "qwen3/brand-new: new golden (25 tokens)",
        "qwen3/tools: 9 tokens removed at 106-114",
        f"qwen3/whitespace: golden removed (had {len(golden_file.read(GOLDENS / 'qwen3' / 'whitespace.json').ids)} tokens)",
        "3 goldens changed against HEAD",
    ]
    assert rows(out, "-") == [(i, before.ids[i], repr(before.pieces[i])) for i in range(106, 115)]
    assert rows(out, "+") == []
    assert [pos for pos, _, _ in rows(out, " ")] == [103, 104, 105, 115, 116, 117]
    assert "@@ old 103-117, new 103-108 @@" in out
    assert "@@ text at character" in out and "characters removed @@" in out

    # staged counts the same as unstaged and untracked; a commit moves the changes behind HEAD
    git(repo, "add", "-A")
    assert run_diff(repo) == out
    git(repo, "commit", "-q", "-m", "bump")
    assert run_diff(repo) == "no golden changed against HEAD\n"
    assert run_diff(repo, "HEAD~1") == out.replace("against HEAD", "against HEAD~1")


def test_markdown_lists_what_moved_with_diff_blocks(repo):
    edit(repo, "qwen3/plain", change_token)
    edit(repo, "qwen3/tools", remove_tokens)
    text = run_diff(repo, "--markdown", "--context", 12)
    lines = text.splitlines()
    assert lines[0] == "**goldens diff against `HEAD`**: 2 goldens changed"
    assert lines[2] == "#### Tokens moved (2)"
    assert lines[4] == "- **qwen3/plain**: 1 token changed at 5"
    blocks = re.findall(r"^- \*\*(\S+)\*\*: .*?\n\n  ```diff\n(.*?)\n  ```", text, re.S | re.M)
    assert [name for name, _ in blocks] == ["qwen3/plain", "qwen3/tools"]
    assert "  -  5  50537 ' terse'" in blocks[0][1] and "  +  5  12345 ' tersely'" in blocks[0][1]
    # qwen3/plain: 20 token rows and 3 of text, shown; qwen3/tools: 9 removed + 24 of context +
    # the text is past FOLD_ROWS, so it sits in a closed <details> block
    assert diff.FOLD_ROWS == 30
    assert "<details>" not in text.split("- **qwen3/tools**")[0]
    assert "  <details><summary>37 rows</summary>" in text.split("- **qwen3/tools**")[1]
    assert text.count("<details>") == 1 and text.count("</details>") == 1

    # the terminal cuts the long one at FOLD_ROWS rows unless --full
    out = run_diff(repo, "--context", 12)
    assert "  … 7 more rows (--full shows them)" in out
    tools = out.split("qwen3/tools: ")[1].splitlines()[1:]
    assert len(tools[:tools.index("")]) == diff.FOLD_ROWS + 1
    full = run_diff(repo, "--context", 12, "--full")
    assert "more rows" not in full and len(full.splitlines()) == len(out.splitlines()) + 6


def test_metadata_only_and_outcome_changes_are_summarised(repo):
    def bump(item):
        item.provenance["template_sha256"] = "0" * 64

    def refuse(item):
        item.outcome, item.error, item.ids, item.pieces, item.prompt = "error", "raise_exception: no", [], [], None

    def retext(item):
        item.prompt += " "

    edit(repo, "qwen3/plain", bump)
    edit(repo, "qwen3/cjk-emoji", retext)
    edit(repo, "qwen3/whitespace", bump)
    edit(repo, "qwen3/tools-reduced_key-order.vllm", bump)  # ledger entries are counted as such
    edit(repo, "qwen3/tools-reduced_key-order.llama-server", bump)
    edit(repo, "qwen3/tools", refuse)
    out = run_diff(repo)
    # first, what moved in the model's sources: here only a sha (the pack's template is not in the repository)
    sources, out = out.split("\n\n", 1)
    assert sources.splitlines()[0].startswith("qwen3: its sources changed (template_sha256 ")
    assert "the template's text is not in this repository" in sources
    heads = [line for line in out.splitlines() if line and not line.startswith(" ")]
    assert heads[0].startswith("qwen3/tools: now refused by the reference (raise_exception: no); had ")
    assert out.splitlines()[1:3] == ["  - outcome ok", "  + outcome error: raise_exception: no"]
    # same ids, other text: after what moved, before the model's line, with its rows
    assert heads[1] == "qwen3/cjk-emoji: same tokens, rendered text changed"
    assert "@@ text at character 80: 1 character added @@" in out.split(heads[1])[1].split(heads[2])[0]
    # the four metadata-only files are one line for the model, after what moved
    sha = golden_file.read(GOLDENS / "qwen3" / "plain.json").provenance["template_sha256"]
    assert out.splitlines()[-3] == ("qwen3: 2 goldens and 2 ledger entries with tokens unchanged · "
                                    f"provenance.template_sha256 {sha[:12]}… → 000000000000… in 4")
    assert "qwen3/plain" not in out and "qwen3/whitespace" not in out and "key-order.vllm" not in out
    assert out.splitlines()[-1] == "6 goldens changed against HEAD: 1 with tokens moved, 4 with tokens unchanged"


@pytest.mark.parametrize("old, new, expected", [
    ([1, 2, 3, 4], [1, 2, 3, 4, 5, 6], "2 tokens added at 4-5"),
    ([1, 2, 3, 4, 5], [1, 9, 9, 9, 5], "3 tokens changed at 1-3"),
    ([1, 2, 3, 4, 5], [1, 9, 5], "3 tokens replaced by 1 at 1-3"),
    ([1, 2, 3, 4, 5], [1, 2, 3, 5], "1 token removed at 3"),
    ([1, 2, 3, 4, 5, 6], [1, 7, 3, 8, 5, 9], "1 token changed at 1; 1 token changed at 3; 1 token changed at 5"),
    ([1, 2, 3, 4, 5, 6, 7, 8], [0, 2, 0, 4, 0, 6, 0, 8], "4 changes from token 0: 4 old tokens replaced by 4 new"),
])
def test_token_change_phrasing(old, new, expected):
    assert alignment.describe_tokens(alignment.opcodes(old, new)) == expected


def test_bad_input_is_one_line_exit_2(repo, tmp_path_factory):
    assert "unknown git revision 'nope'" in one_line_error(invoke("diff", "nope", "--goldens", repo / "goldens"))
    assert "is not a git revision" in one_line_error(invoke("diff", "--goldens", repo / "goldens", "--", "-x"))
    elsewhere = tmp_path_factory.mktemp("plain")
    shutil.copytree(GOLDENS / "qwen3", elsewhere / "goldens" / "qwen3")
    line = one_line_error(invoke("diff", "--goldens", elsewhere / "goldens"))
    assert "not inside a git repository" in line
    assert "no such directory" in one_line_error(invoke("diff", "--goldens", repo / "missing"))
    bad = repo / "goldens" / "qwen3" / "plain.json"
    bad.write_text(bad.read_text()[:100])
    line = one_line_error(invoke("diff", "--goldens", repo / "goldens"))
    assert str(bad) in line and "not valid JSON" in line


def test_a_changed_golden_in_the_committed_tree_reads_via_git_show(repo):
    """The old side is the revision's blob, not the working tree: change, commit, change back."""
    edit(repo, "qwen3/plain", change_token)
    git(repo, "commit", "-q", "-am", "edit")
    git(repo, "checkout", "-q", "HEAD~1", "--", "goldens/qwen3/plain.json")
    out = run_diff(repo)
    assert out.splitlines()[0] == "qwen3/plain: 1 token changed at 5"
    assert rows(out, "-") == [(5, 12345, "' tersely'")] and rows(out, "+") == [(5, 50537, "' terse'")]


SENTENCE = "You may call one or more functions to assist with the user query."


@pytest.mark.slow
def test_a_one_sentence_template_edit_reads_what_moved_first(tmp_path):
    """The reviewer's case: one sentence of Qwen3's template edited, `goldens regenerate`, then
    `goldens diff`. All qwen3 goldens change; those whose tokens moved (the tool shapes, their
    dialect cases and the client body with a tool call) come first with their token-level change,
    each change shown once and named for the others; those where only the template's provenance
    moved are one line for the model."""
    from conftest import CONFIG, ROOT, source_of

    from generator.config.cases import all_cases, model_cases

    shutil.copytree(GOLDENS / "qwen3", tmp_path / "goldens" / "qwen3")
    shutil.copytree(ROOT / "requests", tmp_path / "requests")  # the request files models.yaml names
    config = (ROOT / "models.yaml").read_text(encoding="utf-8")
    pinned = '    tokenizer: {pack: "npm:qwen3"}'
    assert config.count(pinned) == 1
    (tmp_path / "models.yaml").write_text(
        config.replace(pinned, pinned + "\n    template: {file: qwen3.jinja}", 1), encoding="utf-8")
    template = source_of("qwen3").template
    assert template.count(SENTENCE) == 1
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "goldens")
    (tmp_path / "qwen3.jinja").write_text(template.replace(SENTENCE, SENTENCE.replace("assist", "help")),
                                          encoding="utf-8")
    result = invoke("regenerate", "--config", tmp_path / "models.yaml", "--out", tmp_path / "goldens",
                    "--model", "qwen3")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    written = len(all_cases(CONFIG.models["qwen3"]))  # every golden of the model, both axes: the template is in each
    assert result.stdout.strip().splitlines()[-1] == f"{written} written, 0 unchanged, 0 removed"

    out = run_diff(tmp_path, "--report", tmp_path / "out" / "diff.md")
    lines = out.splitlines()
    assert lines[0].startswith("qwen3: its sources changed (template_sha256 ")  # the cause, before its effects
    heads = [line for line in lines[1:] if line and not line.startswith(" ")]
    # the goldens whose prompt holds the sentence (the tool shapes and their dialects, the
    # client body with a tool call) move; the other qwen3 goldens keep their tokens
    committed = {p.stem: golden_file.read(p) for p in sorted((GOLDENS / "qwen3").glob("*.json")) if "." not in p.stem}
    moved = sorted(f"qwen3/{stem}" for stem, item in committed.items() if SENTENCE in (item.prompt or ""))
    n, total = len(moved), written  # the parse goldens' output ids follow the prompt: none moves
    assert n >= 14 and len(committed) == len(model_cases(CONFIG.models["qwen3"]))
    assert sorted(h.split(":")[0] for h in heads[:n]) == moved
    assert all(" changed at " in h for h in heads[:n])
    assert sum("the same change as" in h for h in heads[:n]) >= n - 4  # the rows are shown once per change
    assert (18, 7789, "' assist'") in rows(out, "-") and (18, 1492, "' help'") in rows(out, "+")
    assert not any("provenance" in h for h in heads[:n])  # that is the model line's to say
    sha = golden_file.read(GOLDENS / "qwen3" / "plain.json").provenance["template_sha256"]
    assert heads[n].startswith(f"qwen3: {total - n} goldens with tokens unchanged · provenance.template "
                               f"'tokenizer_config.json (default)' → 'file:qwen3.jinja' in {total} · "
                               f"provenance.template_sha256 {sha[:12]}… → ")
    assert heads[n + 1:] == [f"{total} goldens changed against HEAD: {n} with tokens moved, {total - n} with tokens unchanged"]
    assert len(lines) < total

    text = (tmp_path / "out" / "diff.md").read_text(encoding="utf-8")
    assert text == run_diff(tmp_path, "--markdown")
    assert text.index(f"#### Tokens moved ({n})") < text.index("#### Tokens unchanged: provenance or analyses")
    assert text.count("```diff") == 1 + text.count("#### Model sources")  # the tokens' change once, each source's
    assert f"- **qwen3**: {total - n} goldens with tokens unchanged" in text
