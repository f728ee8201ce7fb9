"""Any OpenAI-compatible /v1/chat/completions server given --url: engine.py."""
