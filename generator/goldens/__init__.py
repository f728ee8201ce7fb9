"""Golden files: the format, regenerate (reference render -> files) and the token-level diff."""
