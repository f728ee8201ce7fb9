"""openai-harmony: engine.py (the engine), worker.py (the worker run in its own venv) and
applies.py (the gpt-oss models it takes)."""
