"""The program that writes a tiny GGUF, run by tiny_gguf.py under the pinned llama.cpp's gguf-py.

    python tiny_gguf_writer.py '<spec as JSON>' <out.gguf>

It runs as a script in a child process whose PYTHONPATH starts with the llama.cpp source's
`gguf-py` (it differs from the PyPI `gguf` of the same version number), so it imports nothing
from goldens. The converter module (conversion/base.py) needs torch, so the few functions that
write a vocab are reimplemented here, line for line where it matters (`_vocab_gpt2`,
`_vocab_spm_from_json`); its pre-tokenizer table is read from its source, not copied.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from pathlib import Path

N_EMBD = 64
N_HEAD = 4
N_FF = 128
N_CTX_TRAIN = 4096


def write(spec: dict, out: Path) -> None:
    """A one-layer llama GGUF with seeded random f16 weights and the spec's tokenizer."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(spec["name"])

    if spec["vocab_gguf"]:
        n_vocab = _copy_vocab(writer, Path(spec["vocab_gguf"]), spec["template"])
    else:
        n_vocab = _vocab_from_dir(writer, Path(spec["tokenizer_dir"]), spec)

    writer.add_vocab_size(n_vocab)
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_rope_freq_base(10000.0)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # numpy shapes are (rows, cols) = ggml's {ne1, ne0}; norms stay f32 as the converter keeps them.
    rng = np.random.default_rng(spec["seed"])

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    writer.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for tensor in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{tensor}.weight", weight(N_EMBD, N_EMBD))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", weight(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_up.weight", weight(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_down.weight", weight(N_EMBD, N_FF))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _copy_vocab(writer, vocab_gguf: Path, template: str | None) -> int:
    """Every tokenizer.* key of a llama.cpp vocab GGUF, byte for byte, types included."""
    import gguf

    reader = gguf.GGUFReader(str(vocab_gguf))
    n_vocab = None
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.") or (key == "tokenizer.chat_template" and template is not None):
            continue
        main = field.types[0]
        if main == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                values = [bytes(field.parts[i]) for i in field.data]
            else:
                values = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_key_value(key, values, main, sub_type=sub)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        elif main == gguf.GGUFValueType.STRING:
            writer.add_key_value(key, bytes(field.parts[field.data[0]]), main)
        else:
            writer.add_key_value(key, field.parts[field.data[0]].tolist()[0], main)
    if n_vocab is None:
        raise SystemExit(f"{vocab_gguf} has no tokenizer.ggml.tokens")
    if template is not None:
        writer.add_chat_template(template)
    return n_vocab


def _vocab_from_dir(writer, tokenizer_dir: Path, spec: dict) -> int:
    """Pick the converter path: SentencePiece-style BPE (byte fallback, spaces as U+2581, e.g.
    Gemma 3) becomes a "llama" SPM vocab; anything else is GPT-2 BPE with a hashed pre-tokenizer.
    """
    import gguf

    with open(tokenizer_dir / "tokenizer.json", encoding="utf-8") as f:
        tokenizer_json = json.load(f)
    model = tokenizer_json["model"]
    spm_like = model.get("type") == "BPE" and model.get("byte_fallback") and "\u2581" in json.dumps(
        tokenizer_json.get("normalizer"), ensure_ascii=False
    )
    if spm_like:
        tokens, scores, toktypes = _vocab_spm_from_json(tokenizer_dir, tokenizer_json, spec["vocab_size"])
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(toktypes)
        special_vocab = gguf.SpecialVocab(tokenizer_dir, n_vocab=len(tokens))
        # Gemma3Model.set_vocab: the SentencePiece model adds no dummy prefix.
        writer.add_add_space_prefix(False)
    else:
        tokens, toktypes, tokpre = _vocab_gpt2(tokenizer_dir, spec["vocab_size"], Path(spec["converter"]))
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(tokpre)
        writer.add_token_list(tokens)
        writer.add_token_types(toktypes)
        special_vocab = gguf.SpecialVocab(tokenizer_dir, load_merges=True)
    if spec["template"] is not None:
        special_vocab.chat_template = spec["template"]
    special_vocab.add_to_gguf(writer, quiet=True)
    return len(tokens)


def _does_token_look_special(token_text: str) -> bool:
    """conversion/base.py TextModel.does_token_look_special."""
    seems_special = token_text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
    seems_special = seems_special or (token_text.startswith("<|") and token_text.endswith("|>"))
    seems_special = seems_special or (token_text.startswith("<\uff5c") and token_text.endswith("\uff5c>"))
    seems_special = seems_special or (token_text.startswith("<unused") and token_text.endswith(">"))
    return seems_special


def _vocab_gpt2(tokenizer_dir: Path, vocab_size: int | None, converter: Path):
    """conversion/base.py TextModel.get_vocab_base, with config.json's vocab_size as an argument."""
    import gguf
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = tokenizer.get_vocab()
    vocab_size = vocab_size or len(vocab)
    assert max(vocab.values()) < vocab_size

    tokpre = _vocab_base_pre(tokenizer, converter)
    reverse_vocab = {id_: encoded_tok for encoded_tok, id_ in vocab.items()}
    added_vocab = tokenizer.get_added_vocab()
    added_tokens_decoder = tokenizer.added_tokens_decoder

    tokens: list[str] = []
    toktypes: list[int] = []
    for i in range(vocab_size):
        if i not in reverse_vocab:
            tokens.append(f"[PAD{i}]")
            toktypes.append(gguf.TokenType.UNUSED)
            continue
        token: str = reverse_vocab[i]
        if token in added_vocab:
            # llama.cpp assumes CONTROL and USER_DEFINED tokens are pre-normalized
            if not added_tokens_decoder[i].normalized:
                token = tokenizer.decode(tokenizer.encode(token, add_special_tokens=False))
            if added_tokens_decoder[i].special or _does_token_look_special(token):
                toktypes.append(gguf.TokenType.CONTROL)
            else:
                token = token.replace("\u2581", " ")  # pre-normalize user-defined spaces
                toktypes.append(gguf.TokenType.USER_DEFINED)
        else:
            toktypes.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    return tokens, toktypes, tokpre


def _vocab_base_pre(tokenizer, converter: Path) -> str:
    """conversion/base.py get_vocab_base_pre: hash the tokens of the converter's own check text
    and look the hash up in the converter's own table (read from its source, not copied)."""
    source = converter.read_text(encoding="utf-8")
    start = source.index("# Marker: Start get_vocab_base_pre")
    end = source.index("# Marker: End get_vocab_base_pre")
    body = source[start:end]
    chktxt_match = re.search(r"^\s*chktxt = (.+)$", body, re.M)
    assert chktxt_match is not None
    chktxt = ast.literal_eval(chktxt_match.group(1))
    table = dict(re.findall(r'if chkhsh == "([0-9a-f]{64})":\s*\n(?:\s*#.*\n)*\s*res = "([^"]+)"', body))
    chktok = tokenizer.encode(chktxt)
    chkhsh = hashlib.sha256(str(chktok).encode()).hexdigest()
    if chkhsh not in table:
        raise SystemExit(f"BPE pre-tokenizer not recognized by the pinned converter (chkhsh {chkhsh})")
    return table[chkhsh]


def _vocab_spm_from_json(tokenizer_dir: Path, tokenizer_json: dict, vocab_size: int | None):
    """The vocab `_create_vocab_sentencepiece` would write from tokenizer.model, rebuilt from the
    tokenizer.json that HF made from that same model (the pack ships no tokenizer.model).

    SentencePiece's BPE trainer scores piece i as -i in merge order, so NORMAL pieces score
    -id (their merges in tokenizer.json follow id order); byte pieces are BYTE, the unknown
    piece UNKNOWN, pieces the HF converter turned into added tokens keep the SentencePiece
    type (CONTROL when special, else USER_DEFINED), all scoring 0 as in the model. Then the
    converter's own overrides from tokenizer_config.json's added_tokens_decoder apply:
    CONTROL when special or special-looking, else USER_DEFINED with U+2581 as spaces, -1000.
    """
    import gguf

    SentencePieceTokenTypes = gguf.TokenType
    model = tokenizer_json["model"]
    base = {int(i): tok for tok, i in model["vocab"].items()}
    vocab_size = vocab_size or (max(base) + 1)
    unk = model.get("unk_token")
    added = {a["id"]: a for a in tokenizer_json.get("added_tokens", [])}

    tokens: list[bytes] = [f"[PAD{i}]".encode("utf-8") for i in range(vocab_size)]
    scores: list[float] = [-10000.0] * vocab_size
    toktypes: list[int] = [SentencePieceTokenTypes.UNUSED] * vocab_size
    for token_id, piece in base.items():
        if token_id >= vocab_size:
            continue
        toktype = SentencePieceTokenTypes.NORMAL
        score = -float(token_id)
        if piece == unk:
            toktype, score = SentencePieceTokenTypes.UNKNOWN, 0.0
        elif token_id in added:
            special = added[token_id]["special"]
            toktype = SentencePieceTokenTypes.CONTROL if special else SentencePieceTokenTypes.USER_DEFINED
            score = 0.0
        elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", piece):
            toktype, score = SentencePieceTokenTypes.BYTE, 0.0
        tokens[token_id] = piece.encode("utf-8")
        scores[token_id] = score
        toktypes[token_id] = toktype

    config_file = tokenizer_dir / "tokenizer_config.json"
    with open(config_file, encoding="utf-8") as f:
        added_tokens_decoder = json.load(f).get("added_tokens_decoder", {})
    for token_id_str, token_data in added_tokens_decoder.items():
        token_id = int(token_id_str)
        token: str = token_data["content"]
        if token_id >= vocab_size:
            continue  # the converter logs "id is out of range" and skips it too
        if token_data.get("special") or _does_token_look_special(token):
            toktypes[token_id] = SentencePieceTokenTypes.CONTROL
        else:
            token = token.replace("\u2581", " ")  # pre-normalize user-defined spaces
            toktypes[token_id] = SentencePieceTokenTypes.USER_DEFINED
        scores[token_id] = -1000.0
        tokens[token_id] = token.encode("utf-8")
    return tokens, scores, toktypes


if __name__ == "__main__":
    write(json.loads(sys.argv[1]), Path(sys.argv[2]))
