"""The built tokenizers are the models' real ones: llama.cpp's vectors, Meta's and Mistral's own code.

The matrix's tokenizers come through models.yaml and sources.source.resolve, as everywhere else;
the raw llama.cpp vocab GGUFs through sources.gguf. The first run builds every directory into the
cache (a few minutes, most of it gguf-py reading the large vocab GGUFs); later runs reuse them.
"""

from __future__ import annotations

import json

import pytest
from conftest import CONFIG, source_of

from generator.errors import GoldensError
from generator.reference import load_tokenizer as _auto  # loaded once per directory, for the whole session
from generator.sources import gguf, hf_tokenizer, llama3, pack, tekken, vectors
from generator.sources.source import tokenizer_fingerprint

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello there, 你好 😀"},
]



def vocab_dir(name: str):
    """The tokenizer directory of llama.cpp's ggml-vocab-<name>.gguf as the GGUF states it."""
    return gguf.tokenizer_dir(gguf.llama_cpp_vocab(name))


def model_dir(model: str):
    """A matrix model's tokenizer directory, resolved from models.yaml."""
    return source_of(model).tokenizer_dir


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
@pytest.mark.slow
def test_gguf_tokenizer_passes_llama_cpp_vectors(gguf_vocab):
    directory = vocab_dir(gguf_vocab)
    tokenizer = _auto(directory)
    assert tokenizer.is_fast
    gguf_path = gguf.llama_cpp_vocab(gguf_vocab)
    assert len(vectors.read(gguf_path)) >= 46
    assert vectors.check(directory, gguf_path) == []


@pytest.mark.parametrize(
    "model,gguf_vocab", [("phi3.5", "phi-3"), ("command-r", "command-r"), ("gemma4", "gemma-4")]
)
@pytest.mark.slow
def test_matrix_gguf_models_pass_their_vectors(model, gguf_vocab):
    assert source_of(model).gguf == gguf.llama_cpp_vocab(gguf_vocab)
    assert vectors.check(model_dir(model), gguf.llama_cpp_vocab(gguf_vocab)) == []


@pytest.mark.slow  # loads every model's tokenizer through AutoTokenizer: the whole matrix's
def test_every_matrix_model_resolves_to_a_loadable_fast_tokenizer():
    for model in CONFIG.models:
        directory = model_dir(model)
        config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
        assert config.get("bos_token") or config.get("eos_token"), model
        assert _auto(directory).is_fast, model


def test_check_vectors_reports_a_wrong_tokenizer():
    # Phi-3's tokenizer against the Llama 3 vectors: nearly everything differs.
    problems = vectors.check(model_dir("phi3.5"), gguf.llama_cpp_vocab("llama-bpe"))
    assert len(problems) > 30
    assert all(line.startswith("ggml-vocab-llama-bpe.gguf test ") and "\n" not in line for line in problems)


def test_read_vectors_splits_like_llama_cpp(tmp_path):
    gguf = tmp_path / "ggml-vocab-x.gguf"
    sep = "\n__ggml_vocab_test__\n"
    (tmp_path / "ggml-vocab-x.gguf.inp").write_text(f"a b{sep}{sep}\n\nc{sep}", encoding="utf-8")
    (tmp_path / "ggml-vocab-x.gguf.out").write_text(" 1 2\n\n 3\n", encoding="utf-8")
    assert vectors.read(gguf) == [("a b", [1, 2]), ("", []), ("\n\nc", [3])]
    # The last test without its trailing separator (as in the gemma-4 file) is still a test.
    (tmp_path / "ggml-vocab-x.gguf.inp").write_text(f"a b{sep}{sep}\n\nc", encoding="utf-8")
    assert vectors.read(gguf)[-1] == ("\n\nc", [3])


def test_read_vectors_errors_name_the_file(tmp_path):
    gguf = tmp_path / "ggml-vocab-x.gguf"
    with pytest.raises(GoldensError, match="ggml-vocab-x.gguf.inp"):
        vectors.read(gguf)
    (tmp_path / "ggml-vocab-x.gguf.inp").write_text("a\n__ggml_vocab_test__\n", encoding="utf-8")
    (tmp_path / "ggml-vocab-x.gguf.out").write_text(" 1\n 2\n", encoding="utf-8")
    with pytest.raises(GoldensError, match=r"ggml-vocab-x.gguf.out: 2 lines of ids for 1 tests"):
        vectors.read(gguf)


# ---------------------------------------------------------------------------------------------
# What the GGUFs leave out


@pytest.mark.slow
def test_llama_bpe_needs_ignore_merges_and_has_no_extra_token():
    directory = vocab_dir("llama-bpe")
    data = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    assert data["model"]["ignore_merges"] is True
    tokenizer = _auto(directory)
    assert len(tokenizer) == 128256  # no GPT-2 <|endoftext|> at 128256
    assert tokenizer.encode("Cửa Việt", add_special_tokens=False) == [34, 91163, 101798]
    assert tokenizer.encode("Hi")[0] == 128000  # llama.cpp's default for llama-bpe: add BOS


@pytest.mark.integration
def test_llama_bpe_gguf_and_npm_pack_are_llama_3_0():
    npm = _auto(pack.npm_models_dir("llama3_1"))
    gguf = _auto(vocab_dir("llama-bpe"))
    for tokenizer in (npm, gguf):
        assert tokenizer.convert_ids_to_tokens([128008, 128010]) == [
            "<|reserved_special_token_4|>", "<|reserved_special_token_5|>"]
        assert len(tokenizer.encode("<|eom_id|>", add_special_tokens=False)) > 1


def test_phi3_chat_tokens_strip_the_whitespace_after_them():
    tokenizer = _auto(model_dir("phi3.5"))
    added = {token.content: token for token in tokenizer.added_tokens_decoder.values()}
    assert added["<|user|>"].rstrip and added["<|end|>"].rstrip and added["<|assistant|>"].rstrip
    assert added["</s>"].rstrip and not added["</s>"].special
    assert not added["<s>"].rstrip and not added["<|endoftext|>"].rstrip
    ids = tokenizer.encode("<|user|>\nHi<|end|>\n<|assistant|>\n", add_special_tokens=False)
    assert tokenizer.convert_ids_to_tokens(ids) == ["<|user|>", "▁Hi", "<|end|>", "<|assistant|>"]


def test_phi35_adds_no_bos_while_the_phi3_gguf_says_it_does():
    """models.yaml states Phi-3.5's add_bos_token for that model; anyone else using the phi-3
    vocab gets what the GGUF says."""
    config = json.loads((model_dir("phi3.5") / "tokenizer_config.json").read_text())
    assert config["add_bos_token"] is False
    assert _auto(model_dir("phi3.5")).encode("Hi")[0] != 1
    raw = json.loads((vocab_dir("phi-3") / "tokenizer_config.json").read_text())
    assert raw["add_bos_token"] is True
    assert _auto(vocab_dir("phi-3")).encode("Hi")[0] == 1


@pytest.mark.slow  # loads a vocabulary of some 256k tokens, of no other use to the fast tier (2-3 s)
def test_command_r_keeps_every_id_and_no_padding_placeholder_is_matched():
    tokenizer = _auto(model_dir("command-r"))
    assert len(tokenizer) == 256000
    assert tokenizer.convert_ids_to_tokens([268, 33572]) == ["™", "âĦ¢"]
    assert tokenizer.encode("™", add_special_tokens=False) == [33572]
    assert len(tokenizer.encode("[PAD255999]", add_special_tokens=False)) > 1
    turn = tokenizer.encode("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", add_special_tokens=False)
    assert turn == [255000, 255006]


@pytest.mark.slow  # loads a vocabulary of some 256k tokens, of no other use to the fast tier (2-3 s)
def test_gemma4_chat_tokens_are_single_and_bos_comes_from_the_template():
    tokenizer = _auto(model_dir("gemma4"))
    assert tokenizer.encode("<|turn>user\n", add_special_tokens=False)[0] == 105
    assert tokenizer.encode("Hi")[0] != 2
    ids = _chat_ids(tokenizer, _template("google-gemma-4-31B-it.jinja"))
    assert ids[:2] == [2, 105]


# ---------------------------------------------------------------------------------------------
# Llama 3.1


@pytest.mark.slow
def test_llama31_vectors_and_31_special_tokens():
    directory = model_dir("llama3")
    assert vectors.check(directory, gguf.llama_cpp_vocab("llama-bpe")) == []
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


@pytest.mark.integration
def test_llama31_bpe_is_metas_hugging_face_bpe():
    ours = json.loads((model_dir("llama3") / "tokenizer.json").read_text(encoding="utf-8"))
    meta = json.loads((pack.npm_models_dir("llama3_1") / "tokenizer.json").read_text(encoding="utf-8"))
    assert ours["model"]["vocab"] == meta["model"]["vocab"]
    assert [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in ours["model"]["merges"]] == [
        tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in meta["model"]["merges"]]
    assert ours["pre_tokenizer"] == meta["pre_tokenizer"]


def test_llama31_encodes_like_llama_models_own_tokenizer():
    from llama_models.llama3.tokenizer import Tokenizer

    reference = Tokenizer(llama3.tiktoken_file())
    tokenizer = _auto(model_dir("llama3"))
    texts = [text for text, _ in vectors.read(gguf.llama_cpp_vocab("llama-bpe"))] + [
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
        "<|python_tag|>call()<|eom_id|>",
        "你好，世界！😀🦙",
    ]
    for text in texts:
        expected = reference.encode(text, bos=False, eos=False, allowed_special="all")
        assert tokenizer.encode(text, add_special_tokens=False) == expected, text
    for token in ("<|eom_id|>", "<|python_tag|>", "<|eot_id|>", "<|start_header_id|>"):
        assert tokenizer.convert_tokens_to_ids(token) == reference.special_tokens[token]


def test_llama31_template_renders_with_single_header_tokens():
    tokenizer = _auto(model_dir("llama3"))
    ids = _chat_ids(tokenizer, _template("meta-llama-Llama-3.1-8B-Instruct.jinja"))
    assert ids[:2] == [128000, 128006]  # one BOS: written by the template, none added on top
    assert ids.count(128000) == 1 and ids[-4:] == [128006, 78191, 128007, 271]


# ---------------------------------------------------------------------------------------------
# Mistral NeMo


def test_tekken_encodes_like_mistral_common():
    from generator.engines.mistral_common.engine import load_tekken

    reference = load_tekken(str(source_of("mistral-nemo").tekken)).instruct_tokenizer.tokenizer
    tokenizer = _auto(model_dir("mistral-nemo"))
    texts = [text for text, _ in vectors.read(gguf.llama_cpp_vocab("llama-bpe"))] + [
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

    from generator.engines.mistral_common.engine import load_tekken

    reference = load_tekken(str(source_of("mistral-nemo").tekken))
    request = ChatCompletionRequest(messages=[SystemMessage(content=CONVERSATION[0]["content"]),
                                              UserMessage(content=CONVERSATION[1]["content"])])
    expected = reference.encode_chat_completion(request).tokens
    tokenizer = _auto(model_dir("mistral-nemo"))
    assert _chat_ids(tokenizer, _template("mistralai-Mistral-Nemo-Instruct-2407.jinja")) == expected


# ---------------------------------------------------------------------------------------------
# Templates of the GGUF-built models


def test_phi35_template_renders():
    tokenizer = _auto(model_dir("phi3.5"))
    ids = _chat_ids(tokenizer, _template("microsoft-Phi-3.5-mini-instruct.jinja"))
    assert ids[0] == 32006 and ids[-1] == 32001 and 1 not in ids


@pytest.mark.slow  # loads Command R's tokenizer, a model outside conftest.FAST_MODELS
def test_command_r_templates_render():
    tokenizer = _auto(model_dir("command-r"))
    templates = gguf.chat_templates(gguf.llama_cpp_vocab("command-r"))
    assert sorted(templates) == ["default", "rag", "tool_use"]
    ids = _chat_ids(tokenizer, templates["default"])
    assert ids[:3] == [5, 255000, 255008] and ids[-2:] == [255000, 255007]
    tool_use = _chat_ids(tokenizer, _template("CohereForAI-c4ai-command-r-plus-tool_use.jinja"), tools=[])
    assert tool_use[:3] == [5, 255000, 255008] and tool_use[-2:] == [255000, 255007]


# ---------------------------------------------------------------------------------------------
# Determinism, fingerprints (the provenance hash, generator.sources.source.tokenizer_fingerprint), errors


@pytest.mark.slow
def test_builds_are_byte_identical_and_fingerprinted(tmp_path):
    phi3 = gguf.llama_cpp_vocab("phi-3")
    first = gguf.build_tokenizer_dir(phi3, tmp_path / "a")
    second = gguf.build_tokenizer_dir(phi3, tmp_path / "b")
    for name in hf_tokenizer.TOKENIZER_FILES:
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert sorted(p.name for p in first.iterdir()) == sorted(hf_tokenizer.TOKENIZER_FILES)
    cached = vocab_dir("phi-3")
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second) == tokenizer_fingerprint(cached)
    # Rebuilding over an existing directory replaces it whole.
    again = gguf.build_tokenizer_dir(phi3, first)
    assert tokenizer_fingerprint(again) == tokenizer_fingerprint(second)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_tekken_build_is_deterministic(tmp_path):
    first = tekken.tokenizer_dir(tmp_path / "a")
    second = tekken.tokenizer_dir(tmp_path / "b")
    cached = model_dir("mistral-nemo")
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second) == tokenizer_fingerprint(cached)


def test_fingerprint_covers_every_byte(tmp_path):
    source = model_dir("phi3.5")
    for name in hf_tokenizer.TOKENIZER_FILES:
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
        gguf.build_tokenizer_dir(missing, tmp_path / "out")
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(GoldensError, match="garbage.gguf: not a readable GGUF file") as raised:
        gguf.build_tokenizer_dir(garbage, tmp_path / "out")
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_missing_vocab_and_missing_tokenizer_dir(tmp_path):
    with pytest.raises(GoldensError, match="ggml-vocab-nope.gguf: no such vocab GGUF"):
        gguf.llama_cpp_vocab("nope")
    with pytest.raises(GoldensError, match="tokenizer.json: no such tokenizer file"):
        vectors.check(tmp_path, gguf.llama_cpp_vocab("phi-3"))
