#!/usr/bin/env bash
# The loop engine's benchmark (issue: loop engine, point 8). It prints wall
# times and ratios; it asserts nothing but the outcomes. Run from the
# repository root, after `cargo build --release -p bl-cli`:
#
#   benchmarks/loops/bench.sh
#
# bounded-loops 0.7.6's whole catalog (69 loops, from its published
# package, installed in a throwaway venv) is run four ways, each loop in a
# fresh copy of its package:
#   1. bounded-loops, `bl run NAME --yes --json`, loop by loop;
#   2. bounded-loops, the same commands, BENCH_JOBS at a time (`xargs -P`;
#      default: one per CPU);
#   3. bl, `bl run NAME --yes --json`, loop by loop: like for like with 1;
#   4. bl, the whole catalog as one command, `bl run NAME... --yes --json
#      --jobs BENCH_JOBS`: like for like with 2.
# bl's figures are the best of BENCH_REPS runs (default 3); bounded-loops'
# are one run each (they take about a minute). Every run must end with 62
# loops DONE, so a broken engine cannot post a time.
set -euo pipefail
shopt -s inherit_errexit
root="$(cd "$(dirname "$0")/../.." && pwd)"
bl="${BL:-$root/target/release/bl}"
[ -x "$bl" ] || bl="$root/target/debug/bl"
[ -x "$bl" ] || { echo "build bl first: cargo build --release -p bl-cli" >&2; exit 2; }
bl="$(realpath "$bl")"
work="${BENCH_DIR:-$(mktemp -d /tmp/bl-loops-bench.XXXXXX)}"
venvs="${BENCH_VENVS:-/tmp/bl-bench-venvs}"
reps="${BENCH_REPS:-3}"
jobs="${BENCH_JOBS:-$(nproc)}"
if [ ! -x "$venvs/bounded-loops/bin/bl" ]; then
  python3 -m venv "$venvs/bounded-loops"
  "$venvs/bounded-loops/bin/pip" install -q bounded-loops==0.7.6
fi
upstream="$venvs/bounded-loops/bin/bl"
catalog="$("$venvs/bounded-loops/bin/python" -c 'import bounded_loops, os; print(os.path.join(os.path.dirname(bounded_loops.__file__), "catalog", "loops"))')"
names=$(ls "$catalog")
echo "bl: $bl; bounded-loops: $upstream; $(echo "$names" | wc -w) loops; $(nproc) cores; work dir $work"

# run_catalog ENGINE MODE -> seconds for the whole catalog. MODE is `each`
# (one command per loop, one after another), `xargs` (one command per loop,
# $jobs at a time) or `batch` (one bl command).
run_catalog() {
  local engine="$1" mode="$2" dir="$work/run-$RANDOM$RANDOM" name t0 t1
  mkdir -p "$dir"
  for name in $names; do
    cp -r "$catalog/$name" "$dir/$name"
    rm -rf "$dir/$name/seed/__pycache__"
  done
  t0=$(date +%s.%N)
  if [ "$mode" = each ]; then
    for name in $names; do
      (cd "$dir" && "$engine" run "$name" --yes --json 2>/dev/null | tail -n 1 >"$dir/$name.out") || true
    done
  elif [ "$mode" = xargs ]; then
    # shellcheck disable=SC2016 # expanded by the inner shell
    (cd "$dir" && echo "$names" | xargs -P "$jobs" -I{} sh -c '"$0" run {} --yes --json 2>/dev/null | tail -n 1 >{}.out' "$engine") || true
  else
    # shellcheck disable=SC2086 # one argument per loop name
    (cd "$dir" && "$engine" run $names --yes --json --jobs "$jobs" 2>/dev/null >"$dir/batch.out") || true
  fi
  t1=$(date +%s.%N)
  local done
  done=$(cat "$dir"/*.out | grep -c '"status": "DONE"' || true)
  [ "$done" -eq 62 ] || { echo "$engine ($mode): $done loops DONE, not 62; see $dir" >&2; exit 1; }
  python3 -c "print(f'{$t1 - $t0:.3f}')"
}

# best_of MODE -> bl's best time over $reps runs of the catalog.
best_of() {
  local best="" t
  for _ in $(seq "$reps"); do
    t=$(run_catalog "$bl" "$1") || exit 1
    best=$(python3 -c "print(min(float('$t'), float('${best:-inf}')))")
  done
  echo "$best"
}

up=$(run_catalog "$upstream" each)
up_jobs=$(run_catalog "$upstream" xargs)
each=$(best_of each)
batch=$(best_of batch)
ratio() { python3 -c "print(f'{$1 / $2:.1f}')"; }
printf 'loop by loop:           bounded-loops %7.3f s   bl %7.3f s   bl is %sx faster\n' \
  "$up" "$each" "$(ratio "$up" "$each")"
printf '%s loops at a time:      bounded-loops %7.3f s   bl %7.3f s   bl is %sx faster\n' \
  "$jobs" "$up_jobs" "$batch" "$(ratio "$up_jobs" "$batch")"
printf 'bl, %s at a time, against bounded-loops loop by loop: %sx\n' "$jobs" "$(ratio "$up" "$batch")"
