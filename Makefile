# goldens: the two everyday commands are `make regenerate` and `make test`.
# Everything installs into .venv; downloads, builds and tiny models go to $(GOLDENS_CACHE)
# (default ~/.cache/goldens), never into the repository.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
DOCS_SITE  ?= out/site
BENCH_PAGE ?= docs/benchmarks.md

.PHONY: setup sources regenerate test test-fast check bench docs clean

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

sources: setup           ## download what the matrix's sources read (tokenizers, templates, the llama.cpp source, harmony's vocabulary): the fast tier needs them and downloads nothing
	$(BIN)/python -m generator.sources.warm

# Bytecode, pytest's rewritten test modules included, is cached under .venv even where the
# environment says PYTHONDONTWRITEBYTECODE: without it every run, and every `goldens` process a
# test starts, compiles the project again (measured: collection 4.6 s of CPU without, 2.2 s with;
# the tests' child processes 13.1 s without, 11.3 s with).
PYCACHE := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache
# glibc keeps what a test frees instead of handing it back and faulting it in again: the fast
# tier loads and drops tokenizers and goldens thousands of times (measured: 1.6 million page
# faults and 19 s of system time without these, 1.1 million and 10 s with them; CONTRIBUTING.md)
ALLOCATOR := MALLOC_TRIM_THRESHOLD_=4000000000 MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TOP_PAD_=268435456

# The tests' scratch folders (tmp_path) on a RAM-backed tmpfs when one has 4 GB free: the fast
# tier copies the committed matrix some thirty times, and a new file on this machine's ext4 costs
# about ten times one on tmpfs (a copy of goldens/ and requests/: 0.5 s of CPU against 0.07 s).
# Only a failed test's folder is kept, so no run is left holding memory; with no such tmpfs
# (macOS, a container's 64 MB /dev/shm, one mounted noexec: tests run scripts they write)
# pytest's own default stays.
SCRATCH := $(shell findmnt -bno FSTYPE,AVAIL,OPTIONS --target /dev/shm 2>/dev/null | awk 'NR == 1 && $$1 == "tmpfs" && $$2 > 4e9 && $$3 !~ /noexec/ { print "/dev/shm" }')
FAST_TMP := $(if $(SCRATCH),PYTEST_DEBUG_TEMPROOT=$(SCRATCH)) PYTEST_ADDOPTS="-o tmp_path_retention_policy=failed $(PYTEST_ADDOPTS)"

test-fast: setup         ## the fast tier: no server, build, venv install or download (GOLDENS_LIGHT refuses them), nothing `slow`
	$(PYCACHE) $(ALLOCATOR) $(FAST_TMP) GOLDENS_LIGHT=1 $(BIN)/pytest -m "not integration and not slow" -q

check: setup             ## the CI gate: replay the matrix, write JUnit and Markdown reports
	$(BIN)/goldens check --junit out/goldens.xml --report out/goldens.md

bench: setup             ## speed against the floor of the same run: regenerate (and with nothing changed), replay, venvs, builds, a first check, coverage, bisect, history, vLLM's render server, the output side, shards (tests/test_bench.py smoke-runs them); each writes its section of $(BENCH_PAGE)
	$(BIN)/python bench/regenerate.py --page $(BENCH_PAGE)
	$(BIN)/python bench/no_change.py --page $(BENCH_PAGE)
	$(BIN)/python bench/replay.py --page $(BENCH_PAGE)
	$(BIN)/python bench/venv.py --cold --page $(BENCH_PAGE)
	$(BIN)/python bench/build.py --page $(BENCH_PAGE)
	$(BIN)/python bench/first_check.py --page $(BENCH_PAGE)
	$(BIN)/python bench/coverage.py --page $(BENCH_PAGE)
	$(BIN)/python bench/bisection.py --page $(BENCH_PAGE)
	$(BIN)/python bench/history.py --page $(BENCH_PAGE)
	$(BIN)/python bench/vllm_render.py --page $(BENCH_PAGE)
	$(BIN)/python bench/parse.py --page $(BENCH_PAGE)
	$(BIN)/python bench/shards.py --page $(BENCH_PAGE)

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[docs]'   # + mkdocs, mkdocs-material
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)      ## build the site from docs/ (mkdocs.yml) into $(DOCS_SITE), warnings as errors
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(DOCS_SITE)

clean:
	rm -rf $(VENV) out .pytest_cache
