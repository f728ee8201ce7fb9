"""Measuring an engine's request layer, below the engines so each engine's own coverage module
(generator/engines/<engine>/coverage.py) can build on it: a session's tallies and per-function
figures (engine.py) and the reachable set of a Python request layer, read with `ast` (reach.py).
coverage/engine_layers.py finds each engine's module through the registry and runs it."""
