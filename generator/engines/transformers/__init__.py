"""Transformers as an engine (another release replayed against the reference's goldens):
engine.py (the engine and its version line), parse.py (transformers serve's output side),
venv.py and worker.py (another release's venv and the worker rendering in it)."""
