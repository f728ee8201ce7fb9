"""minijinja (TGI's template engine): engine.py (the engine) and coverage.py (its request layer
as `goldens coverage --engine minijinja` measures it)."""
