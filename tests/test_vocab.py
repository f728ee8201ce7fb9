"""The built tokenizers are the models' real ones: llama.cpp's vectors, Meta's and Mistral's own code.

The first run builds every directory into the cache (a few minutes, most of it gguf-py reading
the large vocab GGUFs); later runs reuse them.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import pytest

from generator.errors import GoldensError
from generator.sources import pack, vocab
from generator.sources.source import tokenizer_fingerprint

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello there, 你好 😀"},
]

needs_llama_models = pytest.mark.skipif(
    importlib.util.find_spec("llama_models") is None,
    reason="llama-models is not installed (pip install llama-models==0.3.0)",
)


@functools.lru_cache(maxsize=None)
def _auto(directory: Path):
    """Loaded once per directory: a 256k vocabulary takes seconds to load."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


def _template(name: str) -> str:
    return (pack.llama_cpp_source() / "models" / "templates" / name).read_text(encoding="utf-8")


def _chat_ids(tokenizer, template: str, conversation=CONVERSATION, **kwargs) -> list[int]:
    out = tokenizer.apply_chat_template(
        conversation, chat_template=template, tokenize=True, add_generation_prompt=True, **kwargs
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


# ---------------------------------------------------------------------------------------------
# llama.cpp's test vectors


@pytest.mark.parametrize("gguf_vocab", ["phi-3", "llama-bpe", "command-r", "gemma-4"])
def test_gguf_tokenizer_passes_llama_cpp_vectors(gguf_vocab):
    directory = vocab.gguf_tokenizer_dir(gguf_vocab)
    tokenizer = _auto(directory)
    assert tokenizer.is_fast
    gguf_path = vocab.vocab_gguf(gguf_vocab)
    assert len(vocab.read_vectors(gguf_path)) >= 46
    assert vocab.check_vectors(directory, gguf_path) == []


@pytest.mark.parametrize(
    "key,gguf_vocab", [("phi3_5", "phi-3"), ("command_r", "command-r"), ("gemma4", "gemma-4")]
)
def test_matrix_gguf_models_pass_their_vectors(key, gguf_vocab):
    assert vocab.check_vectors(vocab.tokenizer_dir(key), vocab.vocab_gguf(gguf_vocab)) == []


def test_every_matrix_key_resolves_to_a_loadable_fast_tokenizer():
    for key in vocab.matrix_keys():
        if key == "llama3_1" and importlib.util.find_spec("llama_models") is None:
            continue
        directory = vocab.tokenizer_dir(key)
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
        assert config.get("bos_token") or config.get("eos_token"), key
        assert _auto(directory).is_fast, key


def test_check_vectors_reports_a_wrong_tokenizer():
    # Phi-3's tokenizer against the Llama 3 vectors: nearly everything differs.
    problems = vocab.check_vectors(vocab.tokenizer_dir("phi3_5"), vocab.vocab_gguf("llama-bpe"))
    assert len(problems) > 30
    assert all(line.startswith("ggml-vocab-llama-bpe.gguf test ") and "\n" not in line for line in problems)


def test_read_vectors_splits_like_llama_cpp(tmp_path):
    gguf = tmp_path / "ggml-vocab-x.gguf"
    sep = "\n__ggml_vocab_test__\n"
    (tmp_path / "ggml-vocab-x.gguf.inp").write_text(f"a b{sep}{sep}\n\nc{sep}", encoding="utf-8")
    (tmp_path / "ggml-vocab-x.gguf.out").write_text(" 1 2\n\n 3\n", encoding="utf-8")
    assert vocab.read_vectors(gguf) == [("a b", [1, 2]), ("", []), ("\n\nc", [3])]
    # The last test without its trailing separator (as in the gemma-4 file) is still a test.
    (tmp_path / "ggml-vocab-x.gguf.inp").write_text(f"a b{sep}{sep}\n\nc", encoding="utf-8")
    assert vocab.read_vectors(gguf)[-1] == ("\n\nc", [3])


def test_read_vectors_errors_name_the_file(tmp_path):
    gguf = tmp_path / "ggml-vocab-x.gguf"
    with pytest.raises(GoldensError, match="ggml-vocab-x.gguf.inp"):
        vocab.read_vectors(gguf)
    (tmp_path / "ggml-vocab-x.gguf.inp").write_text("a\n__ggml_vocab_test__\n", encoding="utf-8")
    (tmp_path / "ggml-vocab-x.gguf.out").write_text(" 1\n 2\n", encoding="utf-8")
    with pytest.raises(GoldensError, match=r"ggml-vocab-x.gguf.out: 2 lines of ids for 1 tests"):
        vocab.read_vectors(gguf)


# ---------------------------------------------------------------------------------------------
# What the GGUFs leave out


def test_llama_bpe_needs_ignore_merges_and_has_no_extra_token():
    directory = vocab.gguf_tokenizer_dir("llama-bpe")
    data = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    assert data["model"]["ignore_merges"] is True
    tokenizer = _auto(directory)
    assert len(tokenizer) == 128256  # no GPT-2 <|endoftext|> at 128256
    assert tokenizer.encode("Cửa Việt", add_special_tokens=False) == [34, 91163, 101798]
    assert tokenizer.encode("Hi")[0] == 128000  # llama.cpp's default for llama-bpe: add BOS


def test_llama_bpe_gguf_and_npm_pack_are_llama_3_0():
    npm = _auto(pack.npm_models_dir("llama3_1"))
    gguf = _auto(vocab.gguf_tokenizer_dir("llama-bpe"))
    for tokenizer in (npm, gguf):
        assert tokenizer.convert_ids_to_tokens([128008, 128010]) == [
            "<|reserved_special_token_4|>", "<|reserved_special_token_5|>"]
        assert len(tokenizer.encode("<|eom_id|>", add_special_tokens=False)) > 1


def test_phi3_chat_tokens_strip_the_whitespace_after_them():
    tokenizer = _auto(vocab.tokenizer_dir("phi3_5"))
    added = {token.content: token for token in tokenizer.added_tokens_decoder.values()}
    assert added["<|user|>"].rstrip and added["<|end|>"].rstrip and added["<|assistant|>"].rstrip
    assert added["</s>"].rstrip and not added["</s>"].special
    assert not added["<s>"].rstrip and not added["<|endoftext|>"].rstrip
    ids = tokenizer.encode("<|user|>\nHi<|end|>\n<|assistant|>\n", add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(ids) == ["<|user|>", "▁Hi", "<|end|>", "<|assistant|>"]


def test_phi35_adds_no_bos_while_the_phi3_gguf_says_it_does():
    config = json.loads((vocab.tokenizer_dir("phi3_5") / "tokenizer_config.json").read_text())
    assert config["add_bos_token"] is False
    assert _auto(vocab.tokenizer_dir("phi3_5")).encode("Hi")[0] != 1
    raw = json.loads((vocab.gguf_tokenizer_dir("phi-3") / "tokenizer_config.json").read_text())
    assert raw["add_bos_token"] is True
    assert _auto(vocab.gguf_tokenizer_dir("phi-3")).encode("Hi")[0] == 1


def test_command_r_keeps_every_id_and_no_padding_placeholder_is_matched():
    tokenizer = _auto(vocab.tokenizer_dir("command_r"))
    assert len(tokenizer) == 256000
    assert tokenizer.convert_ids_to_tokens([268, 33572]) == ["™", "âĦ¢"]
    assert tokenizer.encode("™", add_special_tokens=False) == [33572]
    assert len(tokenizer.encode("[PAD255999]", add_special_tokens=False)) > 1
    turn = tokenizer.encode("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", add_special_tokens=False)
    assert turn == [255000, 255006]


def test_gemma4_chat_tokens_are_single_and_bos_comes_from_the_template():
    tokenizer = _auto(vocab.tokenizer_dir("gemma4"))
    assert tokenizer.encode("<|turn>user\n", add_special_tokens=False)[0] == 105
    assert tokenizer.encode("Hi")[0] != 2
    ids = _chat_ids(tokenizer, _template("google-gemma-4-31B-it.jinja"))
    assert ids[:2] == [2, 105]


# ---------------------------------------------------------------------------------------------
# Llama 3.1


@needs_llama_models
def test_llama31_vectors_and_31_special_tokens():
    directory = vocab.llama3_tokenizer_dir()
    assert vocab.check_vectors(directory, vocab.vocab_gguf("llama-bpe")) == []
    tokenizer = _auto(directory)
    assert tokenizer.encode("<|eom_id|>", add_special_tokens=False) == [128008]
    assert tokenizer.encode("<|python_tag|>", add_special_tokens=False) == [128010]
    assert tokenizer.convert_tokens_to_ids(
        ["<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>", "<|start_header_id|>",
         "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_247|>"]
    ) == [128000, 128001, 128004, 128006, 128007, 128009, 128255]
    assert len(tokenizer) == 128256
    assert tokenizer.bos_token == "<|begin_of_text|>" and tokenizer.eos_token == "<|eot_id|>"
    assert tokenizer.encode("Hi") == [128000, 13347]


@needs_llama_models
def test_llama31_bpe_is_metas_hugging_face_bpe():
    ours = json.loads((vocab.llama3_tokenizer_dir() / "tokenizer.json").read_text(encoding="utf-8"))
    meta = json.loads((pack.npm_models_dir("llama3_1") / "tokenizer.json").read_text(encoding="utf-8"))
    assert ours["model"]["vocab"] == meta["model"]["vocab"]
    assert [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in ours["model"]["merges"]] == [
        tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in meta["model"]["merges"]]
    assert ours["pre_tokenizer"] == meta["pre_tokenizer"]


@needs_llama_models
def test_llama31_encodes_like_llama_models_own_tokenizer():
    from llama_models.llama3.tokenizer import Tokenizer

    reference = Tokenizer(vocab.llama_models_tokenizer_model())
    tokenizer = _auto(vocab.llama3_tokenizer_dir())
    texts = [text for text, _ in vocab.read_vectors(vocab.vocab_gguf("llama-bpe"))] + [
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<|python_tag|>call()<|eom_id|>",
        "你好，世界！😀🦙",
    ]
    for text in texts:
        expected = reference.encode(text, bos=False, eos=False, allowed_special="all")
        assert tokenizer.encode(text, add_special_tokens=False) == expected, text
    for token in ("<|eom_id|>", "<|python_tag|>", "<|eot_id|>", "<|start_header_id|>"):
        assert tokenizer.convert_tokens_to_ids(token) == reference.special_tokens[token]


@needs_llama_models
def test_llama31_template_renders_with_single_header_tokens():
    tokenizer = _auto(vocab.llama3_tokenizer_dir())
    ids = _chat_ids(tokenizer, _template("meta-llama-Llama-3.1-8B-Instruct.jinja"))
    assert ids[:2] == [128000, 128006]  # one BOS: written by the template, none added on top
    assert ids.count(128000) == 1 and ids[-4:] == [128006, 78191, 128007, 271]


# ---------------------------------------------------------------------------------------------
# Mistral NeMo


def test_tekken_encodes_like_mistral_common():
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    reference = MistralTokenizer.from_file(str(vocab.tekken_file())).instruct_tokenizer.tokenizer
    tokenizer = _auto(vocab.tekken_tokenizer_dir())
    texts = [text for text, _ in vocab.read_vectors(vocab.vocab_gguf("llama-bpe"))] + [
        "你好，世界！", "😀🦙 emoji", "[INST] control text [/INST]", "[TOOL_CALLS][{\"name\": 1}]",
    ]
    for text in texts:
        # mistral-common never reads control tokens out of text; HF does unless told not to.
        got = tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        assert got == reference.encode(text, bos=False, eos=False), text
    for name in ("<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                 "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "<pad>"):
        assert tokenizer.convert_tokens_to_ids(name) == reference.get_special_token(name), name
    assert len(tokenizer) == reference.n_words == 131072
    assert tokenizer.encode("[INST]Hi[/INST]", add_special_tokens=False) == (
        [3] + reference.encode("Hi", bos=False, eos=False) + [4])


def test_nemo_template_matches_mistral_common_chat_encoding():
    from mistral_common.protocol.instruct.messages import SystemMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    reference = MistralTokenizer.from_file(str(vocab.tekken_file()))
    request = ChatCompletionRequest(messages=[SystemMessage(content=CONVERSATION[0]["content"]),
                                              UserMessage(content=CONVERSATION[1]["content"])])
    expected = reference.encode_chat_completion(request).tokens
    tokenizer = _auto(vocab.tekken_tokenizer_dir())
    assert _chat_ids(tokenizer, _template("mistralai-Mistral-Nemo-Instruct-2407.jinja")) == expected


# ---------------------------------------------------------------------------------------------
# Templates of the GGUF-built models


def test_phi35_template_renders():
    tokenizer = _auto(vocab.tokenizer_dir("phi3_5"))
    ids = _chat_ids(tokenizer, _template("microsoft-Phi-3.5-mini-instruct.jinja"))
    assert ids[0] == 32006 and ids[-1] == 32001 and 1 not in ids


def test_command_r_templates_render():
    tokenizer = _auto(vocab.tokenizer_dir("command_r"))
    templates = vocab.gguf_chat_templates(vocab.vocab_gguf("command-r"))
    assert sorted(templates) == ["default", "rag", "tool_use"]
    ids = _chat_ids(tokenizer, templates["default"])
    assert ids[:3] == [5, 255000, 255008] and ids[-2:] == [255000, 255007]
    tool_use = _chat_ids(tokenizer, _template("CohereForAI-c4ai-command-r-plus-tool_use.jinja"), tools=[])
    assert tool_use[:3] == [5, 255000, 255008] and tool_use[-2:] == [255000, 255007]


# ---------------------------------------------------------------------------------------------
# Determinism, fingerprints (the provenance hash, generator.sources.source.tokenizer_fingerprint), errors


def test_builds_are_byte_identical_and_fingerprinted(tmp_path):
    gguf = vocab.vocab_gguf("phi-3")
    first = vocab.tokenizer_dir_from_gguf(gguf, tmp_path / "a")
    second = vocab.tokenizer_dir_from_gguf(gguf, tmp_path / "b")
    for name in vocab.TOKENIZER_FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert sorted(p.name for p in first.iterdir()) == sorted(vocab.TOKENIZER_FILES)
    cached = vocab.gguf_tokenizer_dir("phi-3")
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second) == tokenizer_fingerprint(cached)
    # Rebuilding over an existing directory replaces it whole.
    again = vocab.tokenizer_dir_from_gguf(gguf, first)
    assert tokenizer_fingerprint(again) == tokenizer_fingerprint(second)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_tekken_build_is_deterministic(tmp_path):
    first = vocab.tekken_tokenizer_dir(tmp_path / "a")
    second = vocab.tekken_tokenizer_dir(tmp_path / "b")
    cached = vocab.tekken_tokenizer_dir()
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second) == tokenizer_fingerprint(cached)


def test_fingerprint_covers_every_byte(tmp_path):
    source = vocab.tokenizer_dir("phi3_5")
    for name in vocab.TOKENIZER_FILES:
        (tmp_path / name).write_bytes((source / name).read_bytes())
    before = tokenizer_fingerprint(tmp_path)
    assert before == tokenizer_fingerprint(source)
    config = tmp_path / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"add_bos_token": false', '"add_bos_token": true'))
    changed = tokenizer_fingerprint(tmp_path)
    assert changed != before
    # a chat template inside the config has its own pin and does not move this one
    data = json.loads(config.read_text())
    data["chat_template"] = "{{ messages }}"
    config.write_text(json.dumps(data))
    assert tokenizer_fingerprint(tmp_path) == changed
    (tmp_path / "tokenizer.json").unlink()
    assert tokenizer_fingerprint(tmp_path) != changed


def test_gguf_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(GoldensError, match="nope.gguf: no such GGUF file"):
        vocab.tokenizer_dir_from_gguf(missing, tmp_path / "out")
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(GoldensError, match="garbage.gguf: not a readable GGUF file") as raised:
        vocab.tokenizer_dir_from_gguf(garbage, tmp_path / "out")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_unknown_key_and_missing_tokenizer_dir(tmp_path):
    with pytest.raises(GoldensError, match="unknown tokenizer 'nope'"):
        vocab.tokenizer_dir("nope")
    with pytest.raises(GoldensError, match="tokenizer.json: no such tokenizer file"):
        vocab.check_vectors(tmp_path, vocab.vocab_gguf("phi-3"))
