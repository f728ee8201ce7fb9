"""vLLM: engine.py (the engine, its version line, the parse path), server.py (its venvs per
release and the managed render server), tiny_model.py (the weightless model it serves) and
coverage.py (its request layer traced inside the server). The registry names what is loaded."""
