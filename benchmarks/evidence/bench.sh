#!/usr/bin/env bash
# The evidence plane's cost per guarded LangGraph step (issue 34, point 6):
# a release bl serves a fresh workspace with the tool-policy plugin, and
# bench.py runs the same graphs with and without the bridge (one guarded
# node, and the decision and guarded nodes), durability "sync",
# SqliteSaver, and prints what the bridge adds at p50 and p99.
# Exits non-zero when what its one node adds at p99 is over 2 ms.
#
#   benchmarks/evidence/bench.sh [STEPS]      (default 3000: a p99 of 1,000
#   calls rests on its ten slowest, and moved by a millisecond from run to run)
#
# BL=PATH measures that bl instead of building the release one; the target
# is the release build's, so with BL set the figures are printed and the
# target is not held (CI runs it so with the debug build, to keep the
# benchmark working and its figures in the log).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
if [ -n "${BL:-}" ]; then
  bl="$(realpath "$BL")"
  export BENCH_HOLD_TARGET=0
else
  cargo build --quiet --release -p bl-cli
  bl="$root/target/release/bl"
fi
[ -f target/plugins/tool-policy.wasm ] || "$bl" plugin build plugins/tool-policy --out target/plugins --target-dir target/wasm
venv="$root/target/evidence/venv"
if ! "$venv/bin/python3" -c 'import langgraph.checkpoint.sqlite, bl_evidence' 2>/dev/null; then
  echo "no LangGraph venv at $venv: run scripts/dev test once (it installs LangGraph and the client)" >&2
  exit 2
fi
work="$(mktemp -d)"
trap 'kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
"$bl" keys generate --name bench --out "$work/ws.key" >/dev/null
# BENCH_TRANSPORT=http measures loopback TCP instead of the unix socket.
listen=(--socket "$work/ev.sock")
[ "${BENCH_TRANSPORT:-socket}" = http ] && listen=()
BL_PLUGIN_PATH="$root/target/plugins" "$bl" evidence serve --workspace "$work/ws" --key "$work/ws.key" \
  --token-file "$work/token" --policy tool-policy --policy-config '{"allow": ["lookup"]}' "${listen[@]}" \
  > "$work/serve.out" 2> "$work/serve.err" &
server=$!
for _ in $(seq 100); do grep -q '^evidence: ' "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
url="$(sed -n 's/^evidence: //p' "$work/serve.out")"
[ -n "$url" ] || { cat "$work/serve.err" >&2; exit 1; }
echo "machine: $(nproc) cores; bl $("$bl" --version); the service on $url"
"$venv/bin/python3" "${BENCH_PY:-$root/benchmarks/evidence/bench.py}" "$url" "$work/token" "$work" "${1:-3000}"
