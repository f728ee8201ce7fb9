"""Ollama given --url: engine.py (the engine) and applies.py (how the matrix says it renders)."""
