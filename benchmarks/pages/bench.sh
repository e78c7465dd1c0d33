#!/usr/bin/env bash
# The pages' benchmark (issue 31), in headless Chromium through chromedriver.
# It makes a real run of N nodes with about 3N edges and about 10 events a
# node (a fake agent that fails first attempts), and measures:
#   - the arena of that run: how long it takes to make, its size (target
#     under 30 MB), its first paint (target under 1.5 s), when the browser
#     has verified every event, and a click on a node (target under 100 ms);
#   - bl graph watch on a run being written by another process: how long an
#     appended event takes to be on screen (target p95 under 250 ms);
#   - the studio on a 500-node manifest: lint and redraw per keystroke
#     (target p95 under 50 ms).
# Exits 1 when a target is missed (BENCH_NO_FAIL=1: print only). Run from
# the repository root:  benchmarks/pages/bench.sh   (PAGES_NODES=10000)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bl="${BL:-$root/target/release/bl}"
[ -x "$bl" ] || { echo "build bl first: cargo build --release -p bl-cli" >&2; exit 2; }
bl="$(cd "$(dirname "$bl")" && pwd)/$(basename "$bl")"
command -v chromedriver >/dev/null || { echo "chromedriver is missing: scripts/dev test installs it" >&2; exit 2; }
nodes="${PAGES_NODES:-10000}"
work="${BENCH_DIR:-$(mktemp -d /tmp/bl-pages-bench.XXXXXX)}"
mkdir -p "$work"
here="$root/benchmarks/pages"
missed=0
check() { # name value limit
  if python3 -c "import sys; sys.exit(0 if float('$2') <= float('$3') else 1)"; then
    echo "  $1: $2 (target ≤ $3) met"
  else
    echo "  $1: $2 (target ≤ $3) MISSED"; missed=1
  fi
}
field() { python3 -c "import json,sys; print(json.load(open('$1'))['$2'])"; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
chromedriver --port="$port" >/dev/null 2>&1 &
driver=$!
trap 'kill $driver 2>/dev/null || true' EXIT
sleep 1

echo "== the arena of a run of $nodes nodes (bl: $bl)"
# What the browser does with a page does not depend on how bl was built
# (the same run gives the same page bytes); making the page and serving
# watch do, and a debug build is slower at both.
big="$work/big"
rm -rf "$big"
python3 "$here/make_big_graph.py" "$nodes" 3 "$big"
"$bl" keys generate --name pages-bench --out "$big/bench.key" >/dev/null
( cd "$big" && PATH="$big/fake-bin:$PATH" "$bl" graph run --execute manifest.json \
    --connections connections.json --inputs inputs.json --out run \
    --checkpoint-key bench.key >/dev/null 2>"$big/run.err" )
events=$(wc -l < "$big/run/controller-events.jsonl")
edges=$(python3 -c "import json; print(len(json.load(open('$big/manifest.json'))['edges']))")
start=$(date +%s.%N)
"$bl" graph arena --run "$big/run" --pubkey "$big/bench.pub" --out "$big/arena.html" >/dev/null
made=$(python3 -c "print(round($(date +%s.%N) - $start, 2))")
size=$(python3 -c "import os; print(round(os.path.getsize('$big/arena.html') / 1e6, 1))")
echo "  $nodes nodes, $edges edges, $events events; the page took ${made} s to make"
python3 "$here/measure.py" "$port" arena "$big/arena.html" n00000 "n$(printf %05d $((nodes / 2)))" "n$(printf %05d $((nodes - 1)))" > "$work/arena.json"
echo "  $(cat "$work/arena.json")"
# The run is the size the issue names, or the figures below mean nothing.
at_least() { # name value floor
  if [ "$2" -ge "$3" ]; then echo "  $1: $2 (at least $3) met"; else echo "  $1: $2 (at least $3) MISSED"; missed=1; fi
}
if [ "$nodes" -ge 10000 ]; then
  at_least "nodes" "$nodes" 10000
  at_least "edges" "$edges" 30000
  at_least "events" "$events" 100000
fi
check "page size (MB)" "$size" 30
check "first paint (ms)" "$(field "$work/arena.json" first_paint_ms)" 1500
# Not a target of the issue (first paint is), and within a few hundred ms
# of 1.5 s on 2 cores: printed, not held to.
echo "  the drawing on screen: largest contentful paint $(field "$work/arena.json" largest_contentful_paint_ms) ms (no target)"
check "slowest click (ms)" "$(field "$work/arena.json" click_max_ms)" 100
echo "  every event verified in the browser after $(field "$work/arena.json" verified_ms) ms (no target)"

echo "== bl graph watch on a run being written by another process"
live="$work/live"
rm -rf "$live"
python3 "$root/benchmarks/graph/make_graph.py" 60 workspace_only "$live"
# Each agent takes a moment, so events come over several seconds.
sed -i 's|^cat >/dev/null$|cat >/dev/null; sleep 0.15|' "$live/fake-bin/claude"
( cd "$live" && PATH="$live/fake-bin:$PATH" "$bl" graph run --execute manifest.json \
    --connections connections.json --inputs inputs.json --out run --concurrency 2 >/dev/null 2>&1; \
  touch run/controller-events.jsonl.done ) &
runner=$!
# The run's first lines: in its log, or staged beside it until a sync.
until [ -s "$live/run/controller-events.jsonl" ] || compgen -G "$live/run/controller-events.jsonl.staged-*" >/dev/null; do sleep 0.05; done
"$bl" graph watch --run "$live/run" > "$live/watch.out" 2>&1 &
watch=$!
until grep -q '^watch: ' "$live/watch.out"; do sleep 0.05; done
url=$(sed -n 's/^watch: //p' "$live/watch.out")
python3 "$here/measure.py" "$port" watch "$url" "$live/run/controller-events.jsonl" > "$work/watch.json"
kill $watch 2>/dev/null || true
wait $runner $watch 2>/dev/null || true
echo "  $(cat "$work/watch.json")"
check "appended event on screen, p95 (ms)" "$(field "$work/watch.json" delay_p95_ms)" 250
# The p95 is of the events appended after the page loaded: every one of
# them must have reached the screen, or the figure hides a loss.
at_least "events appended after the page loaded that reached the screen" \
  "$(field "$work/watch.json" events_timed)" "$(field "$work/watch.json" events_after_open)"

echo "== the studio on a 500-node manifest"
"$bl" graph studio --from "$big/studio-500.yaml" --out "$work/studio.html" >/dev/null
python3 "$here/measure.py" "$port" studio "$work/studio.html" > "$work/studio.json"
echo "  $(cat "$work/studio.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("keystroke_ms"); print(json.dumps(d))')"
check "lint and redraw per keystroke, p95 (ms)" "$(field "$work/studio.json" keystroke_p95_ms)" 50

if [ "$missed" = 1 ] && [ "${BENCH_NO_FAIL:-}" != 1 ]; then exit 1; fi
