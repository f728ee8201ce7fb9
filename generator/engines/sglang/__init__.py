"""SGLang's output side: engine.py (the parse-only engine and its version line), worker.py (the
release's parsers run in a light venv) and applies.py (the models it parses)."""
