"""transformers.js: engine.py (the engine) and worker.mjs (the Node worker it runs)."""
