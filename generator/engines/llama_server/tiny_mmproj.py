"""Tiny vision projectors (mmproj GGUFs) for llama-server: enough for it to take an image.

llama-server takes images only with a projector file (--mmproj), and how many positions an
image fills is decided there, by the projector's own hyperparameters: for Gemma 3,
(image_size / patch_size / n_merge)^2. The file is written the way llama.cpp's converter
writes a Gemma 3 mmproj (conversion/gemma.py Gemma3VisionModel over MmprojModel): the same
keys, tensor names, types and the same proj_scale_factor rule, from the model's processor
settings in models.yaml, so a setting that moves moves llama-server's count too. The weights
are seeded random and tiny (one SigLIP block, 64 wide): counts never depend on them.

Written with PyPI `gguf` (the mmproj keys are plain strings; no tokenizer metadata is written
here), cached under cache_dir()/tiny/ by a hash of every input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from generator import canonical
from generator.config.models import ProcessorSpec
from generator.errors import GoldensError
from generator.files import build_once, cache_dir

WRITER_VERSION = 1
PROJECTORS = {"Gemma3Processor": "gemma3"}
GEMMA3_PATCH_SIZE = 14  # SigLIP-So400m/14 in every Gemma 3 vision model's vision_config
HIDDEN, HEADS, FF, LAYERS = 64, 4, 128, 1


def gemma3_geometry(spec: ProcessorSpec) -> dict[str, int]:
    """image_size, patch_size and the projector's pooling from the processor settings, as the
    converter computes them: image_seq_length tokens = (image_size/patch_size/scale)^2."""
    size = spec.preprocessor_config.get("size") or {}
    image_size = int(size.get("height") or 896)
    seq = int(spec.processor_config.get("image_seq_length",
                                        spec.preprocessor_config.get("image_seq_length", 256)))
    per_side = int(seq ** 0.5)
    scale = (image_size // GEMMA3_PATCH_SIZE) // per_side if per_side else 0
    if per_side * per_side != seq or scale < 1:
        raise GoldensError(f"mmproj: image_seq_length {seq} does not fit a {image_size}px image "
                           f"in {GEMMA3_PATCH_SIZE}px patches")
    return {"image_size": image_size, "patch_size": GEMMA3_PATCH_SIZE, "scale": scale}


def vocab_with_added(tokenizer_dir: Path) -> int:
    """The text GGUF's vocab size for a vision model: every token, added ones included. The
    converter sizes the vocab by config.json's vocab_size (Gemma 3: 262208), which keeps the
    image token (<image_soft_token>, 262144) that the SentencePiece base vocab stops short of."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)


def projector_type(spec: ProcessorSpec) -> str | None:
    """llama.cpp's projector type for the processor class (None when none is built here)."""
    return PROJECTORS.get(spec.processor_config.get("processor_class")
                          or spec.preprocessor_config.get("processor_class"))


def tiny_mmproj(name: str, spec: ProcessorSpec, n_embd_text: int) -> Path:
    """A cached mmproj GGUF for the model's processor; `n_embd_text` is the text model's width."""
    if projector_type(spec) is None:
        raise GoldensError(f"mmproj for {name}: no tiny projector for this processor "
                           f"(supported: {', '.join(PROJECTORS)})")
    geometry = gemma3_geometry(spec)
    digest = canonical.digest([WRITER_VERSION, name, n_embd_text, spec.processor_config,
                               spec.preprocessor_config])
    out_dir = cache_dir() / "tiny"
    out_dir.mkdir(parents=True, exist_ok=True)
    seed = int(digest[:8], 16)
    return build_once(out_dir / f"mmproj-{name}-{digest[:16]}.gguf",
                      lambda path: _write_gemma3(path, name, spec, geometry, n_embd_text, seed))


def _write_gemma3(out: Path, name: str, spec: ProcessorSpec, geometry: dict[str, int],
                  n_embd_text: int, seed: int) -> None:
    import gguf

    writer = gguf.GGUFWriter(str(out), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name(f"{name} tiny mmproj")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # MmprojModel.set_gguf_parameters
    writer.add_clip_has_vision_encoder(True)
    writer.add_vision_projection_dim(n_embd_text)
    writer.add_vision_image_size(geometry["image_size"])
    writer.add_vision_patch_size(geometry["patch_size"])
    writer.add_vision_embedding_length(HIDDEN)
    writer.add_vision_feed_forward_length(FF)
    writer.add_vision_block_count(LAYERS)
    writer.add_vision_head_count(HEADS)
    writer.add_vision_image_mean([float(v) for v in spec.preprocessor_config["image_mean"]])
    writer.add_vision_image_std([float(v) for v in spec.preprocessor_config["image_std"]])
    # Gemma3VisionModel.set_gguf_parameters
    writer.add_clip_projector_type(gguf.VisionProjectorType.GEMMA3)
    writer.add_vision_attention_layernorm_eps(1e-6)
    writer.add_vision_use_gelu(True)
    if geometry["scale"] != 4:  # the converter writes it only when it is not the default
        writer.add_vision_projector_scale_factor(geometry["scale"])

    rng = np.random.default_rng(seed)

    def weight(*shape: int, dtype=np.float16) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    patch, n_patches = geometry["patch_size"], (geometry["image_size"] // geometry["patch_size"]) ** 2
    # numpy shapes are torch's; ".embeddings." tensors are F32 (Gemma3VisionModel.tensor_force_quant)
    writer.add_tensor("v.patch_embd.weight", weight(HIDDEN, 3, patch, patch, dtype=np.float32))
    writer.add_tensor("v.patch_embd.bias", zeros(HIDDEN))
    writer.add_tensor("v.position_embd.weight", weight(n_patches, HIDDEN, dtype=np.float32))
    for block in range(LAYERS):
        p = f"v.blk.{block}."
        for tensor in ("attn_q", "attn_k", "attn_v", "attn_out"):
            writer.add_tensor(p + tensor + ".weight", weight(HIDDEN, HIDDEN))
            writer.add_tensor(p + tensor + ".bias", zeros(HIDDEN))
        for norm in ("ln1", "ln2"):
            writer.add_tensor(p + norm + ".weight", ones(HIDDEN))
            writer.add_tensor(p + norm + ".bias", zeros(HIDDEN))
        writer.add_tensor(p + "ffn_up.weight", weight(FF, HIDDEN))
        writer.add_tensor(p + "ffn_up.bias", zeros(FF))
        writer.add_tensor(p + "ffn_down.weight", weight(HIDDEN, FF))
        writer.add_tensor(p + "ffn_down.bias", zeros(HIDDEN))
    writer.add_tensor("v.post_ln.weight", ones(HIDDEN))
    writer.add_tensor("v.post_ln.bias", zeros(HIDDEN))
    writer.add_tensor("mm.input_projection.weight", weight(HIDDEN, n_embd_text))
    writer.add_tensor("mm.soft_emb_norm.weight", ones(HIDDEN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def image_tokens(spec: ProcessorSpec) -> int:
    """How many positions llama-server's projector gives one image (for reports and tests)."""
    geometry = gemma3_geometry(spec)
    return (geometry["image_size"] // geometry["patch_size"] // geometry["scale"]) ** 2

