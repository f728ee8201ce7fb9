"""The lock files' one convention (generator/locks.py, docs/locks.md): named after the file they
pin and beside it (inside it, for a folder), one JSON shape whose first lines say what is locked
and which command rewrites it; the names and shapes a team's repository holds from before still
read, and the next write moves them to the convention."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from generator import locks
from generator.config import derived, dialects, models, polyfill
from generator.sources import corpora
from generator.errors import GoldensError

ROOT = Path(__file__).resolve().parent.parent
PINNED = {locks.DIALECTS: ROOT / "models.yaml", locks.CAPABILITIES: ROOT / "models.yaml",
          locks.DERIVED: derived.CATALOGUE, locks.CORPUS: ROOT / "requests" / "bfcl"}
CONFIG = 'models:\n  qwen3:\n    tokenizer: {pack: "npm:qwen3"}\n    shapes: [plain, tool-result]\n    dialects: [developer]\n'


def test_every_lock_is_named_after_the_file_it_pins_and_lies_beside_it():
    """...or, pinning a folder, inside it (what `--out` was given), named after the folder."""
    assert set(PINNED) == set(locks.ALL)
    for lock, pinned in PINNED.items():
        path = lock.path(pinned)
        assert pinned.is_dir() == lock.folder, pinned
        where, stem = (pinned, pinned.name) if lock.folder else (pinned.parent, pinned.stem)
        assert path.parent == where and path.name == f"{stem}.{lock.what}.lock", path
        assert not path.name.startswith(".")  # `.*.lock` is what .gitignore drops: a killed run's file locks
    assert [lock.path(Path("team/ci.yaml")).name for lock in (locks.DIALECTS, locks.CAPABILITIES)] == \
        ["ci.dialects.lock", "ci.capabilities.lock"]


@pytest.mark.parametrize("lock", locks.ALL, ids=lambda lock: lock.what)
def test_every_committed_lock_has_the_one_shape_and_rewrites_to_its_own_bytes(lock):
    """The committed lock says what it is and which command rewrites it in its first lines, and
    writing what it holds gives its bytes back (an unchanged choice rewrites nothing)."""
    pinned = PINNED[lock]
    path = lock.path(pinned)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[1] == f'  "schema": "goldens.{lock.what}.lock/{locks.FORMAT}",', lines[:3]
    assert lines[2] == f'  "written_by": {json.dumps(lock.written_by)},', lines[:3]
    assert lock.found(pinned) == path
    assert not [old for old in lock.old(pinned) if old.exists()]  # renamed, not copied
    assert locks.dumps(lock, locks.read(lock, pinned)) == path.read_text(encoding="utf-8")


def test_an_old_dialects_lock_is_read_and_the_next_write_takes_the_new_name(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    entries = {"qwen3": {"dialects": ["developer"], "cases": ["plain_developer"]}}
    old = tmp_path / "dialects.lock"  # as a team's repository holds it
    old.write_text(json.dumps({"about": "dialect cases kept per model", "models": entries}, indent=2) + "\n")
    assert dialects.read_lock(config) == entries
    assert models.load(config).models["qwen3"].dialect_cases == ("plain_developer",)
    assert dialects.write_lock(config, entries) is True
    assert not old.exists() and dialects.read_lock(config) == entries
    assert json.loads((tmp_path / "models.dialects.lock").read_text())["schema"] == locks.DIALECTS.schema
    assert dialects.write_lock(config, entries) is False  # now in place: nothing to write
    assert models.load(config).models["qwen3"].dialect_cases == ("plain_developer",)


def test_an_old_capabilities_lock_is_read_and_rewritten_in_the_new_shape(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    committed = polyfill.load_lock(ROOT / "models.yaml")
    entries = {"qwen3": committed["qwen3"]}
    path = tmp_path / "models.capabilities.lock"
    path.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")  # the shape before locks.py
    assert polyfill.load_lock(config) == entries
    assert models.load(config).models["qwen3"].capabilities == entries["qwen3"]["capabilities"]
    assert polyfill.write_lock(config, entries) is True
    assert json.loads(path.read_text())["data"] == entries and polyfill.load_lock(config) == entries
    assert polyfill.write_lock(config, entries) is False


def test_an_old_derived_lock_is_read_and_the_next_write_takes_the_new_name(tmp_path):
    catalogue = tmp_path / "schema.json"
    shutil.copy(derived.CATALOGUE, catalogue)
    data = locks.read(locks.DERIVED, derived.CATALOGUE)
    old = tmp_path / "derived.lock"
    old.write_text(json.dumps({"about": "derived dialects", **data}) + "\n")  # requests/derived.lock's shape
    assert derived.read_lock(catalogue) == derived.read_lock() and derived.read_lock(catalogue)
    assert locks.write(locks.DERIVED, catalogue, data) is True
    assert not old.exists() and (tmp_path / "schema.derived.lock").is_file()
    assert derived.read_lock(catalogue) == derived.read_lock()


def test_an_old_corpus_lock_is_read_and_the_next_write_takes_the_new_name_and_shape(tmp_path):
    """A corpus folder imported before locks.py holds `corpus.lock`, the provenance itself: it is
    read as it is, and the next import's write replaces it with `<folder>.corpus.lock`."""
    folder = tmp_path / "bfcl"
    folder.mkdir()
    data = corpora.read_lock(PINNED[locks.CORPUS])
    old = folder / "corpus.lock"
    old.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")  # its old shape
    assert locks.CORPUS.found(folder) == old and corpora.read_lock(folder) == data
    assert corpora.write_lock(folder, data["corpus"], data["kept"], data["read"]) is True
    assert sorted(p.name for p in folder.iterdir()) == ["bfcl.corpus.lock"]
    document = json.loads((folder / "bfcl.corpus.lock").read_text(encoding="utf-8"))
    assert document["schema"] == locks.CORPUS.schema and document["data"] == data
    assert corpora.read_lock(folder) == data
    assert corpora.write_lock(folder, data["corpus"], data["kept"], data["read"]) is False  # in place
    assert (folder / "bfcl.corpus.lock").read_bytes() == locks.CORPUS.path(PINNED[locks.CORPUS]).read_bytes()


def test_a_corpus_lock_without_its_kept_names_is_one_line(tmp_path):
    (tmp_path / "corpus.lock").write_text(json.dumps({"kept": "all"}), encoding="utf-8")
    with pytest.raises(GoldensError) as caught:
        corpora.read_lock(tmp_path)
    assert str(caught.value) == ("corpus.lock: expected a corpus's pin and its kept names; delete it and run "
                                 f"`{locks.CORPUS.written_by}`")


def test_a_lock_of_another_kind_is_one_line_naming_the_command_that_rewrites_it(tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    shutil.copy(ROOT / "models.capabilities.lock", tmp_path / "models.dialects.lock")
    with pytest.raises(GoldensError) as caught:
        dialects.read_lock(config)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("models.dialects.lock: expected a lock with schema "
                                                      f"{locks.DIALECTS.schema!r}")
    assert locks.CAPABILITIES.schema in message and locks.DIALECTS.written_by in message


def test_a_missing_lock_reads_as_none_and_nothing_is_written(tmp_path):
    assert all(locks.read(lock, tmp_path / "models.yaml") is None for lock in locks.ALL)
    assert dialects.read_lock(tmp_path / "models.yaml") == {} and polyfill.load_lock(tmp_path / "models.yaml") == {}
    assert list(tmp_path.iterdir()) == []


def test_a_lock_holding_what_its_owner_does_not_expect_is_one_line(tmp_path):
    config = tmp_path / "models.yaml"
    locks.write(locks.DIALECTS, config, {"qwen3": {"cases": "x"}})
    with pytest.raises(GoldensError) as caught:
        dialects.read_lock(config)
    assert str(caught.value) == ("models.dialects.lock: expected {model: {dialects: [...], cases: [...]}}; "
                                 "delete it and run goldens regenerate --rechoose-dialects")
    locks.write(locks.CAPABILITIES, config, {"qwen3": {"capabilities": {"tools": "maybe"}}})
    with pytest.raises(GoldensError, match=r"^models.capabilities.lock: qwen3: capabilities must map .*"
                                           r"delete it and run `goldens regenerate`$"):
        polyfill.load_lock(config)


def test_a_lock_that_is_not_json_is_one_line_with_the_way_out(tmp_path):
    (tmp_path / "models.capabilities.lock").write_text('{"qwen3": ', encoding="utf-8")
    with pytest.raises(GoldensError) as caught:
        polyfill.load_lock(tmp_path / "models.yaml")
    message = str(caught.value)
    assert message.startswith("models.capabilities.lock") and "\n" not in message
    assert message.endswith("; delete it and run `goldens regenerate`")
