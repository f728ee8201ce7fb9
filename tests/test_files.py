"""files.atomic_dir and files.atomic_file: a build lands whole or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import stat

import pytest

from generator.errors import GoldensError
from generator import files
from generator.files import atomic_dir, atomic_file, sha256_hex


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_a_directory_lands_whole_and_replaces_an_older_build(tmp_path):
    target = tmp_path / "build"
    with atomic_dir(target) as out:
        (out / "a").write_text("1")
        assert not target.exists()  # nothing visible until the block ends
    assert sorted(p.name for p in target.iterdir()) == ["a"]
    with atomic_dir(target) as out:
        (out / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]  # replaced whole, not merged
    assert leftovers(tmp_path) == []


def test_a_failed_directory_build_leaves_the_old_one_and_no_trace(tmp_path):
    target = tmp_path / "build"
    with atomic_dir(target) as out:
        (out / "a").write_text("1")
    with pytest.raises(RuntimeError), atomic_dir(target) as out:
        (out / "half").write_text("x")
        raise RuntimeError("build failed")
    assert sorted(p.name for p in target.iterdir()) == ["a"]
    assert leftovers(tmp_path) == []


def test_a_file_in_the_way_of_a_directory_is_refused(tmp_path):
    target = tmp_path / "build"
    target.write_text("the user's")
    with pytest.raises(GoldensError, match="not a directory; refusing to replace it"), atomic_dir(target):
        pass
    assert target.read_text() == "the user's" and leftovers(tmp_path) == []


def test_a_file_filled_by_another_writer_lands_with_its_mode(tmp_path):
    target = tmp_path / "tool"
    with atomic_file(target, mode=0o755) as tmp:
        tmp.write_bytes(b"#!/bin/sh\n")
        assert tmp.parent == tmp_path and not target.exists()
    assert target.read_bytes() == b"#!/bin/sh\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o755
    with pytest.raises(RuntimeError), atomic_file(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer failed")
    assert target.read_bytes() == b"#!/bin/sh\n" and leftovers(tmp_path) == []


def test_a_file_digest_is_read_once_per_change(tmp_path, monkeypatch):
    """A no-change regenerate must not read every vocabulary again: the digest is remembered
    under the file's identity, and a rewrite of the file (new mtime) reads it again."""
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path / "cache"))
    vocab = tmp_path / "vocab.json"
    vocab.write_bytes(b"a" * 1000)
    assert sha256_hex(vocab) == hashlib.sha256(b"a" * 1000).hexdigest()
    reads = []
    real = hashlib.file_digest
    monkeypatch.setattr(hashlib, "file_digest", lambda *args: reads.append(args) or real(*args))
    assert sha256_hex(vocab) == hashlib.sha256(b"a" * 1000).hexdigest() and reads == []
    vocab.write_bytes(b"b" * 1000)  # same size; the mtime moves on
    later = vocab.stat().st_mtime_ns + 1_000_000_000
    os.utime(vocab, ns=(later, later))
    assert sha256_hex(vocab) == hashlib.sha256(b"b" * 1000).hexdigest() and len(reads) == 1


def test_a_fifo_is_refused_not_hashed(tmp_path, monkeypatch):
    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path / "cache"))
    os.mkfifo(tmp_path / "tokenizer.json")
    with pytest.raises(GoldensError, match="not a regular file"):
        sha256_hex(tmp_path / "tokenizer.json")


def test_a_damaged_cached_directory_is_built_again(tmp_path, capsys):
    """A cache entry is verified on use, not trusted for its marker: a file removed, cut short
    or edited since the build makes it again (issue 34: a pack missing tokenizer.json was
    turned into 36 goldens of garbage)."""
    builds: list[int] = []

    def build(into):
        builds.append(1)
        (into / "tokenizer.json").write_text('{"model": "real"}')
        (into / "sub").mkdir()
        (into / "sub" / "config.json").write_text("{}")
        return "stamp"

    target = tmp_path / "cache" / "pack"
    files.build_dir_once(target, build)
    files._verified.clear()  # a later process
    assert files.build_dir_once(target, build) == target and len(builds) == 1

    def without(name: str) -> None:  # a manifest edited to forget a file, then the file removed
        entries = json.loads((target / files.MANIFEST).read_text())
        del entries[name]
        (target / files.MANIFEST).write_text(json.dumps(entries))
        (target / name).unlink()

    damages = (lambda: (target / "tokenizer.json").unlink(),
               lambda: (target / "tokenizer.json").write_text('{"model": "fake"}'),  # same size
               lambda: (target / "sub" / "config.json").write_text(""),
               # issue 44: the file and the manifest removed; a manifest missing was read as
               # "built before manifests" and the rest trusted
               lambda: [(target / "tokenizer.json").unlink(), (target / files.MANIFEST).unlink()],
               lambda: (target / files.MANIFEST).unlink(),
               lambda: without("tokenizer.json"),
               lambda: (target / files.MANIFEST).write_text("{}"))
    for damage in damages:
        damage()
        files._verified.clear()
        files.build_dir_once(target, build)
        assert (target / "tokenizer.json").read_text() == '{"model": "real"}'
        assert (target / "sub" / "config.json").read_text() == "{}"
    assert len(builds) == 1 + len(damages)
    assert capsys.readouterr().err.count("is damaged") == len(damages)


def test_a_touched_but_unchanged_cache_file_is_not_rebuilt(tmp_path):
    target = tmp_path / "cache" / "entry"
    builds: list[int] = []

    def build(into):
        builds.append(1)
        (into / "a.txt").write_text("same")
        return "stamp"

    files.build_dir_once(target, build)
    os.utime(target / "a.txt", ns=(1, 1))
    files._verified.clear()
    files.build_dir_once(target, build)
    assert builds == [1]
