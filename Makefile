# goldens: the two everyday commands are `make regenerate` and `make test`.
# Everything installs into .venv; downloads, builds and tiny models go to $(GOLDENS_CACHE)
# (default ~/.cache/goldens), never into the repository.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup regenerate test test-fast check bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'   # + pytest, syrupy, check-jsonschema
	touch $(STAMP)

regenerate: setup        ## render every case with the reference and rewrite changed goldens
	$(BIN)/goldens regenerate

test: setup              ## replay the goldens through every engine (builds/starts real servers)
	$(BIN)/pytest --durations=25

test-fast: setup         ## the tier that starts no server, build, venv install or download (GOLDENS_LIGHT refuses them)
	GOLDENS_LIGHT=1 $(BIN)/pytest -m "not integration" -q

check: setup             ## the CI gate: replay the matrix, write JUnit and Markdown reports
	$(BIN)/goldens check --junit out/goldens.xml --report out/goldens.md

bench: setup             ## speed against the floor of the same run: regenerate, replay, venvs, builds, a first check, coverage, bisect, history, shards (tests/test_bench.py smoke-runs them)
	$(BIN)/python bench/regenerate.py
	$(BIN)/python bench/replay.py
	$(BIN)/python bench/venv.py --cold
	$(BIN)/python bench/build.py
	$(BIN)/python bench/first_check.py
	$(BIN)/python bench/coverage.py
	$(BIN)/python bench/bisection.py
	$(BIN)/python bench/history.py
	$(BIN)/python bench/vllm_render.py
	$(BIN)/python bench/shards.py

clean:
	rm -rf $(VENV) out .pytest_cache
