"""files.atomic_dir and files.atomic_file: a build lands whole or not at all."""

from __future__ import annotations

import os
import stat

import pytest

from generator.errors import GoldensError
from generator.files import atomic_dir, atomic_file


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
