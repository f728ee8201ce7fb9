"""mistral-common: engine.py (the engine), coverage.py (its request layer as `goldens coverage
--engine mistral-common` measures it) and applies.py (the tekken models it takes)."""
