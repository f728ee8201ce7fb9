"""Where tokenizers and templates come from: the pinned offline pack, HF/GGUF/dir sources, tokenizers built from GGUF, tekken and llama-models."""
