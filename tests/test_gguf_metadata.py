"""The GGUF header reader: the same values as gguf-py's GGUFReader, without reading arrays."""

from __future__ import annotations

import hashlib

import pytest

from generator.errors import GoldensError
from generator.sources import gguf_metadata
from generator.sources.gguf import llama_cpp_vocab


def _scalars(reader_fields: dict) -> dict:
    """GGUFReader's general.* / tokenizer.* fields that are not arrays, as plain values."""
    out = {}
    for key, field in reader_fields.items():
        if not key.startswith(("general.", "tokenizer.")):
            continue
        value = field.contents()
        if not isinstance(value, list):
            out[key] = value
    return out


def _write(path, endianess):
    import gguf

    writer = gguf.GGUFWriter(path, "llama", endianess=endianess)
    writer.add_chat_template("{{ messages[0]['content'] }}")
    writer.add_chat_template([{"name": "tool_use", "template": "{{ tools }}"},
                              {"name": "rag", "template": "{{ documents }}"}])
    writer.add_token_list(["<s>", "é", "x" * 300, ""])
    writer.add_token_scores([0.0, -1.5, 2.25, 0.5])
    writer.add_token_types([3, 1, 1, 4])
    writer.add_bos_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_array("tokenizer.nested", [[1, 2], [3]])
    writer.add_string("tokenizer.after_arrays", "still read")
    writer.add_float32("general.temperature", 0.5)
    writer.add_string("other.key", "not asked for")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("order", ["LITTLE", "BIG"])
def test_agrees_with_gguf_py_on_a_written_file(tmp_path, order):
    import gguf

    path = _write(tmp_path / "m.gguf", getattr(gguf.GGUFEndian, order))
    light = gguf_metadata.read(path)
    assert light["tokenizer.after_arrays"] == "still read"
    assert light["tokenizer.ggml.add_bos_token"] is True and light["general.temperature"] == 0.5
    assert "other.key" not in light and "tokenizer.ggml.tokens" not in light
    assert gguf_metadata.chat_templates(path) == {
        "default": "{{ messages[0]['content'] }}", "rag": "{{ documents }}", "tool_use": "{{ tools }}",
    }
    if order == "LITTLE":  # gguf-py reads a byte-swapped file only as numpy views; compare natively
        assert light == _scalars(gguf.GGUFReader(path).fields)


@pytest.mark.slow
def test_agrees_with_gguf_py_on_llama_cpp_vocabularies():
    import gguf

    for name in ("phi-3", "llama-spm", "bert-bge"):
        path = llama_cpp_vocab(name)
        assert gguf_metadata.read(path) == _scalars(gguf.GGUFReader(path).fields), name


def test_command_r_templates_are_read_from_the_header():
    """The template the committed command-r goldens were rendered with (their template_sha256)."""
    templates = gguf_metadata.chat_templates(llama_cpp_vocab("command-r"))
    assert sorted(templates) == ["default", "rag", "tool_use"]
    assert hashlib.sha256(templates["default"].encode()).hexdigest() == (
        "9db2cf47ce03bfd0aab6ec59942503714fa0372f09f7e1d54cbcd71a1110b863")


@pytest.mark.parametrize("cut", [3, 10, 40, 200])
def test_a_truncated_or_foreign_file_is_one_line(tmp_path, cut):
    import gguf

    whole = _write(tmp_path / "m.gguf", gguf.GGUFEndian.LITTLE).read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(whole[:cut])
    with pytest.raises(GoldensError) as raised:
        gguf_metadata.chat_templates(path)
    message = str(raised.value)
    assert str(path) in message and "not a readable GGUF file" in message and "\n" not in message


def test_a_missing_or_empty_file_is_one_line(tmp_path):
    (tmp_path / "empty.gguf").write_bytes(b"")
    for path in (tmp_path / "none.gguf", tmp_path / "empty.gguf", tmp_path):
        with pytest.raises(GoldensError) as raised:
            gguf_metadata.read(path)
        assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def _with_tensor(path, tokens, weight):
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_token_list(tokens)
    writer.add_chat_template("{{ messages }}")
    writer.add_tensor("token_embd.weight", np.full((4, 8), weight, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_header_hash_covers_the_key_values_and_not_the_tensors(tmp_path):
    base = _with_tensor(tmp_path / "a.gguf", ["a", "b", "c", "d"], 0.5)
    other_weights = _with_tensor(tmp_path / "b.gguf", ["a", "b", "c", "d"], 1.5)
    other_vocab = _with_tensor(tmp_path / "c.gguf", ["a", "b", "c", "e"], 0.5)
    assert base.read_bytes() != other_weights.read_bytes()
    assert gguf_metadata.header_sha256(base) == gguf_metadata.header_sha256(other_weights)
    assert gguf_metadata.header_sha256(base) != gguf_metadata.header_sha256(other_vocab)
    # The prefix it hashes is the file's own bytes, up to where the key-value pairs end.
    data = base.read_bytes()
    assert any(hashlib.sha256(data[:end]).hexdigest() == gguf_metadata.header_sha256(base)
               for end in range(24, len(data)))


def test_chat_templates_are_read_once_per_change_of_the_file(tmp_path, monkeypatch):
    """A no-change regenerate reads no GGUF: the templates are remembered under the file's
    identity, and a rewritten file (new size or mtime) is read again."""
    import os

    monkeypatch.setenv("GOLDENS_CACHE", str(tmp_path / "cache"))
    import gguf

    path = tmp_path / "model.gguf"
    _write(path, gguf.GGUFEndian.LITTLE)
    first = gguf_metadata.chat_templates(path)
    assert first["default"] == "{{ messages[0]['content'] }}" and set(first) == {"default", "rag", "tool_use"}
    real = gguf_metadata._mapped
    reads = []
    monkeypatch.setattr(gguf_metadata, "_mapped", lambda p, use: reads.append(p) or real(p, use))
    assert gguf_metadata.chat_templates(path) == first and reads == []
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert gguf_metadata.chat_templates(path) == first and reads == [path]
