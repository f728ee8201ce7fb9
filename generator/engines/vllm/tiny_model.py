"""Tiny random-weight Hugging Face models, so a real inference engine can load "a model".

No model hub is reachable, but engines such as vLLM will not start without weights. Goldens only
ask engines about the prompt (tokenize / prompt_token_ids), which depends on the tokenizer and
chat template, never on the weights. So a 2-layer, 64-wide model with the real tokenizer copied
in is enough, and loads in seconds. Weights are written with safetensors' numpy API so the
project venv needs no torch; they are seeded, so the same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer

from generator.errors import GoldensError
from generator.files import build_dir_once, cache_dir

# Bump when the layout below changes, so stale cached models are not reused.
_FORMAT = 1
_ARCHITECTURES = {"Qwen3ForCausalLM": "qwen3", "LlamaForCausalLM": "llama",
                  "Gemma3ForConditionalGeneration": "gemma3"}
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "vocab.json", "merges.txt", "tokenizer.model",
    "processor_config.json", "preprocessor_config.json",  # a vision model's (sources.processor)
)
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 32  # vLLM's CPU attention supports only some head sizes; 32 is among them
INTERMEDIATE = 128


def keyed_dir(folder: str, name: str, header: tuple, sources: list[Path]):
    """A model directory's place in the cache, keyed by what makes it (the header's fields and
    each source file's name and bytes), and the digest (a build records its hexdigest): the
    tiny models and vLLM's render directories share the recipe."""
    digest = hashlib.sha256("".join(f"{part}\0" for part in header).encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return cache_dir() / folder / f"{safe}-{digest.hexdigest()[:16]}", digest


def tiny_hf_model(
    name: str, tokenizer_dir: Path, template: str, *, architecture: str = "Qwen3ForCausalLM"
) -> Path:
    """A model dir (config, weights, tokenizer, chat_template.jinja) cached by its inputs' hash.

    The template is written to chat_template.jinja *and* into the copied tokenizer_config.json,
    so whichever one a loader prefers, it sees exactly `template`.
    """
    if architecture not in _ARCHITECTURES:
        raise GoldensError(
            f"tiny model: unsupported architecture {architecture!r} "
            f"(supported: {', '.join(_ARCHITECTURES)})"
        )
    tokenizer_dir = Path(tokenizer_dir)
    sources = [tokenizer_dir / f for f in _TOKENIZER_FILES if (tokenizer_dir / f).is_file()]
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise GoldensError(f"tiny model {name}: no tokenizer.json in {tokenizer_dir}")

    target, digest = keyed_dir("tiny", name, (_FORMAT, name, architecture, template), sources)

    def build(out: Path) -> str:
        try:
            _write_model(out, sources, template, architecture)
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
            raise GoldensError(f"tiny model {name}: cannot build ({error})") from None
        return digest.hexdigest()

    return build_dir_once(target, build)


def _write_model(out: Path, sources: list[Path], template: str, architecture: str) -> None:
    for source in sources:
        shutil.copyfile(source, out / source.name)
    config_path = out / "tokenizer_config.json"
    tok_config = json.loads(config_path.read_text()) if config_path.exists() else {}
    tok_config["chat_template"] = template
    config_path.write_text(json.dumps(tok_config, indent=2, ensure_ascii=False) + "\n")
    (out / "chat_template.jinja").write_text(template)

    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)

    def token_id(key: str) -> int | None:
        token = tok_config.get(key)
        if isinstance(token, dict):
            token = token.get("content")
        return tokenizer.token_to_id(token) if isinstance(token, str) else None

    if architecture == "Gemma3ForConditionalGeneration":
        _write_gemma3_vision(out, tokenizer, vocab, token_id)
        return
    config = {
        "architectures": [architecture],
        "model_type": _ARCHITECTURES[architecture],
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        "attention_bias": False,
        "tie_word_embeddings": True,  # halves the size: the embedding is most of the model
        "torch_dtype": "float32",
        "dtype": "float32",
        "bos_token_id": token_id("bos_token"),
        "eos_token_id": token_id("eos_token"),
        "pad_token_id": token_id("pad_token"),
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(_weights(vocab, architecture), str(out / "model.safetensors"),
              metadata={"format": "pt"})


VISION_HIDDEN, VISION_FF, VISION_LAYERS = 64, 128, 1


def _write_gemma3_vision(out: Path, tokenizer: Tokenizer, vocab: int, token_id) -> None:
    """Gemma3ForConditionalGeneration as Transformers lays it out (config and weight names),
    tiny: a 2-layer text model and one SigLIP block at Gemma 3's real geometry (896 px, 14 px
    patches, 256 tokens per image, read from the processor settings copied beside it)."""
    processor = json.loads((out / "processor_config.json").read_text())
    preprocessor = json.loads((out / "preprocessor_config.json").read_text())
    image_size = int(preprocessor["size"]["height"])
    tokens = int(processor.get("image_seq_length", 256))
    text = {
        "model_type": "gemma3_text", "vocab_size": vocab, "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "query_pre_attn_scalar": HEAD_DIM, "sliding_window": 512,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
        "bos_token_id": token_id("bos_token"), "eos_token_id": token_id("eos_token"),
        "pad_token_id": token_id("pad_token"), "torch_dtype": "float32",
    }
    vision = {
        "model_type": "siglip_vision_model", "hidden_size": VISION_HIDDEN,
        "intermediate_size": VISION_FF, "num_hidden_layers": VISION_LAYERS,
        "num_attention_heads": HEADS, "num_channels": 3, "image_size": image_size,
        "patch_size": 14, "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6,
        "vision_use_head": False,
    }
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": text, "vision_config": vision, "mm_tokens_per_image": tokens,
        "boi_token_index": tokenizer.token_to_id("<start_of_image>"),
        "eoi_token_index": tokenizer.token_to_id("<end_of_image>"),
        "image_token_index": tokenizer.token_to_id("<image_soft_token>"),
        "tie_word_embeddings": True, "torch_dtype": "float32", "dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731
    zeros = lambda n: np.zeros(n, dtype=np.float32)  # noqa: E731
    v, t = "model.vision_tower.", "model.language_model."
    tensors = {
        v + "embeddings.patch_embedding.weight": normal(VISION_HIDDEN, 3, 14, 14),
        v + "embeddings.patch_embedding.bias": zeros(VISION_HIDDEN),
        v + "embeddings.position_embedding.weight": normal((image_size // 14) ** 2, VISION_HIDDEN),
        v + "post_layernorm.weight": ones(VISION_HIDDEN), v + "post_layernorm.bias": zeros(VISION_HIDDEN),
        "model.multi_modal_projector.mm_input_projection_weight": normal(VISION_HIDDEN, HIDDEN),
        "model.multi_modal_projector.mm_soft_emb_norm.weight": zeros(VISION_HIDDEN),
        t + "embed_tokens.weight": normal(vocab, HIDDEN), t + "norm.weight": zeros(HIDDEN),
    }
    for layer in range(VISION_LAYERS):
        p = f"{v}encoder.layers.{layer}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            tensors[p + f"self_attn.{proj}.weight"] = normal(VISION_HIDDEN, VISION_HIDDEN)
            tensors[p + f"self_attn.{proj}.bias"] = zeros(VISION_HIDDEN)
        for norm in ("layer_norm1", "layer_norm2"):
            tensors[p + f"{norm}.weight"] = ones(VISION_HIDDEN)
            tensors[p + f"{norm}.bias"] = zeros(VISION_HIDDEN)
        tensors |= {p + "mlp.fc1.weight": normal(VISION_FF, VISION_HIDDEN), p + "mlp.fc1.bias": zeros(VISION_FF),
                    p + "mlp.fc2.weight": normal(VISION_HIDDEN, VISION_FF), p + "mlp.fc2.bias": zeros(VISION_HIDDEN)}
    for layer in range(LAYERS):
        p = f"{t}layers.{layer}."
        tensors |= {
            p + "self_attn.q_proj.weight": normal(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": normal(HIDDEN, HEADS * HEAD_DIM),
            p + "self_attn.q_norm.weight": zeros(HEAD_DIM), p + "self_attn.k_norm.weight": zeros(HEAD_DIM),
            p + "mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
        }
        for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm"):
            tensors[p + f"{norm}.weight"] = zeros(HIDDEN)  # Gemma's RMSNorm scales by 1 + weight
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})


def _weights(vocab: int, architecture: str) -> dict[str, np.ndarray]:
    """Small seeded normal weights (float32: numpy has no bfloat16; vLLM casts on load)."""
    rng = np.random.default_rng(0)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)

    ones = lambda n: np.ones(n, dtype=np.float32)  # noqa: E731
    tensors = {"model.embed_tokens.weight": normal(vocab, HIDDEN), "model.norm.weight": ones(HIDDEN)}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        tensors |= {
            p + "input_layernorm.weight": ones(HIDDEN),
            p + "post_attention_layernorm.weight": ones(HIDDEN),
            p + "self_attn.q_proj.weight": normal(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": normal(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": normal(HIDDEN, HEADS * HEAD_DIM),
            p + "mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            p + "mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
        }
        if architecture == "Qwen3ForCausalLM":  # Qwen3 normalises q and k per head
            tensors[p + "self_attn.q_norm.weight"] = ones(HEAD_DIM)
            tensors[p + "self_attn.k_norm.weight"] = ones(HEAD_DIM)
    return tensors
