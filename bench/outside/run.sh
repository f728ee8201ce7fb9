#!/bin/sh
# The held-out measurement (docs/findings.md, "Outside bodies"): the request bodies in bodies/ (found
# in other projects' tests, provenance.json) on every model and engine of models.yaml, goldened
# into a scratch folder (never the committed matrix), checked, and each finding sorted into a cause
# the committed matrix shows or does not (classify.py). About 20 s to regenerate, 3 min to check.
set -e
cd "$(dirname "$0")"
ROOT=../..
GOLDENS="$ROOT/.venv/bin/goldens"
"$ROOT/.venv/bin/python" config.py
rm -rf goldens && mkdir -p goldens && cp -r "$ROOT/goldens/causes" goldens/
"$GOLDENS" regenerate --config models.yaml --goldens goldens > /dev/null
mkdir -p "$ROOT/out"
"$GOLDENS" check --config models.yaml --goldens goldens --results "$ROOT/out/outside.json" > "$ROOT/out/outside.log" 2>&1 || true
grep checked "$ROOT/out/outside.log" | tail -1
"$ROOT/.venv/bin/python" classify.py "$ROOT/out/outside.json"
