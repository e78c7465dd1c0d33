#!/usr/bin/env bash
# How long one `bl plugin run` of the word-count gate takes in each
# language, with its compiled component already in the cache: a new
# process each time, as a loop or a graph calls a gate. Printed against the
# anchor measured in the same run: `bl plugin inspect` of the Rust gate, a
# bl process that reads the same component without running it.
#
#   BL=target/release/bl benchmarks/plugins/cold.sh
#
# The components are the examples `scripts/dev test` builds into
# target/test-plugins. The targets (issue 33): Rust ≤ 10 ms, JavaScript
# ≤ 30 ms, Python ≤ 50 ms. It exits 1 when one is missed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bl="${BL:-$root/target/release/bl}"
plugins="$root/target/test-plugins"
runs="${RUNS:-21}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export BL_CACHE_DIR="$work/cache"
mkdir -p "$work/ws"
echo "one two three four five" > "$work/ws/r.md"
config='{"file": "r.md", "min_words": 3}'

# The median wall time of RUNS runs of the command, in ms.
median_ms() {
  local samples=()
  for _ in $(seq "$runs"); do
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null 2>&1 || true
    end=$(date +%s%N)
    samples+=($(( (end - start) / 1000 )))
  done
  printf '%s\n' "${samples[@]}" | sort -n | awk '{a[NR]=$1} END {printf "%.1f", a[int((NR+1)/2)]/1000}'
}

for name in word-count word-count-py word-count-js; do
  [ -f "$plugins/$name.wasm" ] || { echo "missing $plugins/$name.wasm: run scripts/dev test first" >&2; exit 2; }
  # Compiled once into the cache, as `bl plugin install` does.
  "$bl" plugin run "$plugins/$name.wasm" --workspace "$work/ws" --config "$config" >/dev/null
done
anchor=$(median_ms "$bl" plugin inspect "$plugins/word-count.wasm")
printf '%-16s %10s %10s %10s\n' "gate" "median ms" "x anchor" "target ms"
printf '%-16s %10s %10s %10s\n' "(anchor)" "$anchor" "1.00" "-"
missed=0
for pair in word-count:10 word-count-py:50 word-count-js:30; do
  name="${pair%%:*}" target="${pair##*:}"
  ms=$(median_ms "$bl" plugin run "$plugins/$name.wasm" --workspace "$work/ws" --config "$config")
  verdict=$(awk -v a="$ms" -v t="$target" 'BEGIN {print (a <= t) ? "met" : "MISSED"}')
  [ "$verdict" = met ] || missed=1
  printf '%-16s %10s %10s %10s %s\n' "$name" "$ms" "$(awk -v a="$ms" -v b="$anchor" 'BEGIN {printf "%.2f", a/b}')" "$target" "$verdict"
done
echo "a warm call of a Rust gate (target ≤ 50 µs): cargo bench -p bl-plugins --bench invoke -- warm"
exit "$missed"
