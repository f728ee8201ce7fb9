"""Real servers: process management, the llama.cpp build, the vLLM venv, tiny models around real tokenizers."""
