#!/usr/bin/env bash
# What a loop's history costs each new run: `bl run` checks the whole
# ledger's chain before it appends (it never appends to a broken one), so
# a loop run ten thousand times reads ten thousand lines at every run.
# Runs bounded-loops' `a11y` loop with a fresh ledger (the anchor) and
# with one of LAPS chained laps (default 10,000, about 6.8 MB), taking
# turns, and prints the medians, what the history adds, and that per
# thousand laps. Needs the venv benchmarks/loops/bench.sh makes. Run from
# the repository root, after `cargo build --release -p bl-cli`:
#
#   benchmarks/loops/long-ledger.sh [LAPS] [RUNS]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bl="$(realpath "${BL:-$root/target/release/bl}")"
venvs="${BENCH_VENVS:-/tmp/bl-bench-venvs}"
[ -x "$venvs/bounded-loops/bin/python" ] || { echo "run benchmarks/loops/bench.sh first (it makes the venv)" >&2; exit 2; }
catalog="$("$venvs/bounded-loops/bin/python" -c 'import bounded_loops, os; print(os.path.join(os.path.dirname(bounded_loops.__file__), "catalog", "loops"))')"
work="$(mktemp -d /tmp/bl-long-ledger.XXXXXX)"
trap 'rm -rf "$work"' EXIT
python3 - "$bl" "$catalog/a11y" "$work" "${1:-10000}" "${2:-15}" <<'PY'
import hashlib, json, os, shutil, statistics, subprocess, sys, time
bl, loop, work, laps, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

def run(ledger):
    d = os.path.join(work, "run")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(loop, os.path.join(d, "a11y"))
    if ledger:
        shutil.copy(ledger, os.path.join(d, "a11y", ".ledger.jsonl"))
    t = time.perf_counter()
    done = subprocess.run([bl, "run", "a11y", "--yes", "--json"], cwd=d, capture_output=True)
    took = (time.perf_counter() - t) * 1000
    if done.returncode != 0:
        sys.exit(f"bl run failed: {done.stderr.decode()[-400:]}")
    return took, os.path.join(d, "a11y", ".ledger.jsonl")

# One lap as bl writes it, then the history made of it, chained.
_, first = run(None)
lap = json.loads(open(first).read().splitlines()[-1])
history, prev = os.path.join(work, "history.jsonl"), "0" * 64
with open(history, "w") as out:
    for n in range(1, laps + 1):
        line = json.dumps(dict(lap, prev=prev, lap=n), separators=(",", ":"))
        out.write(line + "\n")
        prev = hashlib.sha256(line.encode()).hexdigest()
fresh, long = [], []
for _ in range(runs):
    fresh.append(run(None)[0])
    long.append(run(history)[0])
a, b = statistics.median(fresh), statistics.median(long)
print(f"bl {bl}; {laps} laps of history ({os.path.getsize(history) / 1e6:.1f} MB), {runs} runs each, taking turns")
print(f"a run with a fresh ledger: {a:.1f} ms (median); with the history: {b:.1f} ms ({b / a:.2f}x)")
print(f"the history adds {b - a:.1f} ms a run: {(b - a) * 1000 / laps:.2f} ms per thousand laps")
PY
