#!/usr/bin/env bash
# Where bl's time goes over bounded-loops 0.7.6's catalog, loop by loop: the
# share spent inside bubblewrap cages (the gates' and workers' own tools,
# which bounded-loops runs too) against bl's own. Needs `perf` (it records
# process starts and exits only) and the venv bench.sh makes. Run from the
# repository root, after `cargo build --release -p bl-cli`:
#
#   benchmarks/loops/where-time-goes.sh
set -euo pipefail
shopt -s inherit_errexit
root="$(cd "$(dirname "$0")/../.." && pwd)"
bl="$(realpath "${BL:-$root/target/release/bl}")"
venvs="${BENCH_VENVS:-/tmp/bl-bench-venvs}"
command -v perf >/dev/null || { echo "needs perf (linux-tools)" >&2; exit 2; }
[ -x "$venvs/bounded-loops/bin/python" ] || { echo "run benchmarks/loops/bench.sh first (it makes the venv)" >&2; exit 2; }
catalog="$("$venvs/bounded-loops/bin/python" -c 'import bounded_loops, os; print(os.path.join(os.path.dirname(bounded_loops.__file__), "catalog", "loops"))')"
work="$(mktemp -d /tmp/bl-loops-where.XXXXXX)"
for name in $(ls "$catalog"); do
  cp -r "$catalog/$name" "$work/$name"
  rm -rf "$work/$name/seed/__pycache__"
done
cat >"$work/all.sh" <<SCRIPT
cd "$work"
for name in $(ls "$catalog" | tr '\n' ' '); do "$bl" run "\$name" --yes --json >/dev/null 2>&1 || true; done
SCRIPT
perf trace -e 'sched:sched_process_exec,sched:sched_process_exit' -o "$work/trace" bash "$work/all.sh"
python3 - "$work/trace" <<'PY'
import re, sys
started, total = {}, {"bl": 0.0, "bwrap": 0.0}
count = {"bl": 0, "bwrap": 0}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d.]+) \S+/(\d+) sched:(\w+)\((.*)", line)
    if not m:
        continue
    t, pid, event, rest = float(m[1]), m[2], m[3], m[4]
    if event == "sched_process_exec":
        name = re.search(r'filename: "([^"]+)"', rest)[1].rsplit("/", 1)[-1]
        if name in total and pid not in started:
            started[pid] = (name, t)
    elif pid in started:
        name, t0 = started.pop(pid)
        total[name] += t - t0
        count[name] += 1
bl, cages = total["bl"], total["bwrap"]
print(f"{count['bl']} bl runs: {bl / 1000:.2f} s in all; {count['bwrap']} cages: {cages / 1000:.2f} s ({100 * cages / bl:.0f}%)")
print(f"bl's own time, outside the cages: {(bl - cages) / 1000:.2f} s ({(bl - cages) / count['bl']:.1f} ms a run)")
print(f"with bl's own time at zero, bl would take {cages / bl:.0%} of what it takes now")
PY
