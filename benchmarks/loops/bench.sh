#!/usr/bin/env bash
# The loop engine's benchmark (issue: loop engine, point 8). It prints wall
# times and the ratio; it asserts nothing. Run from the repository root:
#
#   benchmarks/loops/bench.sh
#
# bounded-loops 0.7.6's whole catalog (69 loops, from its published
# package, installed in a throwaway venv) is run loop by loop with
# `bl run NAME --yes --json`, each in a fresh copy, first by bounded-loops
# and then by bl. bl's figure is the best of BENCH_REPS runs of the whole
# catalog (default 3); bounded-loops' is one run (it takes ~a minute).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bl="${BL:-$root/target/release/bl}"
[ -x "$bl" ] || bl="$root/target/debug/bl"
[ -x "$bl" ] || { echo "build bl first: cargo build -p bl-cli" >&2; exit 2; }
bl="$(realpath "$bl")"
work="${BENCH_DIR:-$(mktemp -d /tmp/bl-loops-bench.XXXXXX)}"
venvs="${BENCH_VENVS:-/tmp/bl-bench-venvs}"
reps="${BENCH_REPS:-3}"
if [ ! -x "$venvs/bounded-loops/bin/bl" ]; then
  python3 -m venv "$venvs/bounded-loops"
  "$venvs/bounded-loops/bin/pip" install -q bounded-loops==0.7.6
fi
upstream="$venvs/bounded-loops/bin/bl"
catalog="$("$venvs/bounded-loops/bin/python" -c 'import bounded_loops, os; print(os.path.join(os.path.dirname(bounded_loops.__file__), "catalog", "loops"))')"
names=$(ls "$catalog")
echo "bl: $bl; bounded-loops: $upstream; $(echo "$names" | wc -w) loops; $(nproc) cores; work dir $work"

# run_catalog ENGINE -> seconds for the whole catalog, each loop in a fresh
# copy; the statuses go to $dir/statuses so a broken engine cannot post a time.
run_catalog() {
  local engine="$1" dir="$work/run-$RANDOM$RANDOM" name t0 t1
  mkdir -p "$dir"
  for name in $names; do
    cp -r "$catalog/$name" "$dir/$name"
    rm -rf "$dir/$name/seed/__pycache__"
  done
  t0=$(date +%s.%N)
  for name in $names; do
    (cd "$dir" && "$engine" run "$name" --yes --json 2>/dev/null | tail -n 1 >"$dir/$name.out") || true
  done
  t1=$(date +%s.%N)
  local done
  done=$(cat "$dir"/*.out | grep -c '"status": "DONE"' || true)
  [ "$done" -eq 62 ] || { echo "$engine: $done loops DONE, not 62; see $dir" >&2; exit 1; }
  python3 -c "print(f'{$t1 - $t0:.3f}')"
}

up=$(run_catalog "$upstream")
best=""
for _ in $(seq "$reps"); do
  t=$(run_catalog "$bl")
  best=$(python3 -c "print(min(float('$t'), float('${best:-inf}')))")
done
printf 'whole catalog: bounded-loops %s s, bl %.3f s   bl is %sx faster\n' \
  "$up" "$best" "$(python3 -c "print(f'{$up / $best:.1f}')")"
