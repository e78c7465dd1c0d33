#!/bin/sh
# Run from this directory. bl = bounded-loops 0.7.6 CLI; fake agent CLIs first on PATH.
# Exit codes are recorded in expected.json; do not stop on non-zero.
export PATH="$PWD/fake-bin:$PATH"
rm -rf run-dir state/calls.jsonl state/flaky-*
bl graph run --execute manifest.json --connections connections.json --inputs inputs.json --out run-dir
bl graph status --run run-dir --json
