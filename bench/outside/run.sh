#!/bin/sh
# The held-out measurement (docs/findings.md, "Outside bodies"): the request bodies in a bodies
# folder (found in other projects' tests, provenance.json) on every model and engine of models.yaml,
# goldened into a scratch folder (never the committed matrix), checked, and each finding sorted into
# a cause the committed matrix shows or does not (classify.py). About 20 s to regenerate, 3 min to
# check.
#
#   sh run.sh            the first batch, bodies/ (results: out/outside.json)
#   sh run.sh bodies2    the second batch, bodies2/ (results: out/outside-bodies2.json)
#   sh run.sh bodies4    the fourth, captured from client libraries (capture/; out/outside-bodies4.json)
#   sh run.sh unwired    the bodies the loader once refused (results: out/outside-unwired.json)
set -e
cd "$(dirname "$0")"
BODIES="${1:-bodies}"
case "$BODIES" in
  bodies) NAME=outside ;;
  *) NAME="outside-$BODIES" ;;
esac
[ -d "$BODIES" ] || { echo "run.sh: no folder $BODIES here" >&2; exit 2; }
ROOT=../..
GOLDENS="$ROOT/.venv/bin/goldens"
"$ROOT/.venv/bin/python" config.py "$BODIES"
rm -rf goldens && mkdir -p goldens && cp -r "$ROOT/goldens/causes" goldens/
"$GOLDENS" regenerate --config models.yaml --goldens goldens > /dev/null
mkdir -p "$ROOT/out"
"$GOLDENS" check --config models.yaml --goldens goldens --results "$ROOT/out/$NAME.json" > "$ROOT/out/$NAME.log" 2>&1 || true
grep checked "$ROOT/out/$NAME.log" | tail -1
"$ROOT/.venv/bin/python" classify.py "$ROOT/out/$NAME.json"
