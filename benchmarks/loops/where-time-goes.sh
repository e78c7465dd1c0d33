#!/usr/bin/env bash
# Where bl's time goes over bounded-loops 0.7.6's catalog, loop by loop:
# the time of the commands the gates and workers run (their tools, which
# bounded-loops runs too), from each one's exec to its exit, against the
# whole of each bl run: what remains is bl's own and its cages'. Needs
# `perf` (it records process forks, execs and exits only) and the venv
# bench.sh makes. Run from the repository root, after
# `cargo build --release -p bl-cli`:
#
#   benchmarks/loops/where-time-goes.sh
#
# The catalog is run PASSES times (default 3), one after another in the
# same record; each pass's figure is printed, and the target is held on
# all of them pooled: one pass (about 4 s) moves by as much as 0.01x from
# run to run on this kind of machine, as much as the margin it measures.
# It exits 1 when the catalog takes more than 1.15x its commands' own time.
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
passes="${PASSES:-3}"
# Each pass in a fresh copy of the catalog, as the first one.
for pass in $(seq 2 "$passes"); do
  mkdir "$work/pass$pass"
  for name in $(ls "$catalog"); do cp -r "$work/$name" "$work/pass$pass/$name"; done
done
cat >"$work/all.sh" <<SCRIPT
for pass in $(seq 1 "$passes" | tr '\n' ' '); do
  if [ "\$pass" = 1 ]; then cd "$work"; else cd "$work/pass\$pass"; fi
  for name in $(ls "$catalog" | tr '\n' ' '); do "$bl" run "\$name" --yes --json >/dev/null 2>&1 || true; done
done
SCRIPT
# One run first, not recorded, so that the first recorded one does not
# pay alone for reading bl and python back into the page cache (it took
# 16 to 52 ms of bl's own, against 8 to 10, in three of nine runs).
mkdir "$work/warm-up" && cp -r "$work/$(ls "$catalog" | head -1)" "$work/warm-up/"
(cd "$work/warm-up" && "$bl" run "$(ls "$catalog" | head -1)" --yes --json >/dev/null 2>&1 || true)
# Recorded system-wide, to a buffer read afterwards: `perf trace` (live)
# and per-process recording (set up again at every fork and exit) made
# bl's own many short processes and threads look up to 1.3 ms a run slower.
# A process's time runs from its exec until it is gone: its last task's
# last switch away (as a zombie), not its exit event, which this kernel
# (6.18) reports before the process gives back its memory: 0.9 ms before,
# for a gate's python.
perf record -q -a -m 8M -o "$work/perf.data" \
  -e 'sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit,sched:sched_switch' \
  -- bash "$work/all.sh"
perf script -i "$work/perf.data" -F pid,tid,time,event,trace >"$work/trace" 2>/dev/null
# bl's runs are told by their exec's file name: whatever BL is called.
BL_NAME="$(basename "$bl")" python3 - "$work/trace" "$passes" $(ls "$catalog") <<'PY'
import os, re, sys
from collections import defaultdict
# Each task's role: "bl" (bl, its threads, the children it starts
# before they exec), "cage" (bubblewrap and its children before they exec),
# "tool" (the first program a bl or a cage starts: a gate's or a worker's
# own command), "below" (what a tool starts: part of the tool's time).
role = {}
started = []               # (kind, process, exec time), in order
tasks = defaultdict(set)   # process -> its tasks
gone = {}                  # task -> its last switch away, as a zombie
exited = {}                # process -> its exit event (if no switch seen)
# A number the kernel gives again (pid_max may be 32,768) names another
# task: each fork starts a new generation of its number.
generation = defaultdict(int)
def named(number):
    return (number, generation[number])
for line in open(sys.argv[1]):
    # `<pid>/<tid> <seconds>: sched:<event>: <fields>`
    m = re.match(r"\s*(\d+)/(\d+)\s+([\d.]+):\s+sched:(\w+):\s*(.*)", line)
    if not m:
        continue
    t, event, rest = float(m[3]) * 1000, m[4], m[5]
    if event == "sched_process_fork":
        parent = re.search(r"(?:^| )pid=(\d+)", rest)[1]
        child = re.search(r"child_pid=(\d+)", rest)[1]
        generation[child] += 1
        role[child] = {"bl": "bl", "cage": "cage"}.get(role.get(parent), "below")
        continue
    process, task = named(m[1]), named(m[2])
    tasks[process].add(task)
    if event == "sched_process_exec":
        name = re.search(r"filename=(\S+)", rest)[1].rsplit("/", 1)[-1]
        if name == os.environ["BL_NAME"]:
            role[m[2]] = "bl"
            started.append(("bl", process, t))
        elif name == "bwrap":
            role[m[2]] = "cage"
        elif name == "exe":
            role[m[2]] = "below"  # bl's watchdog
        elif role.get(m[2]) in ("bl", "cage"):
            role[m[2]] = "tool"
            started.append(("tool", process, t))
    elif event == "sched_process_exit":
        exited.setdefault(process, t)
    elif event == "sched_switch":
        state = re.search(r"prev_state=(\S+)", rest)[1]
        if "Z" in state or "X" in state:
            gone[task] = t

def end_of(process):
    ends = [gone[t] for t in tasks[process] if t in gone]
    return max(ends) if ends else exited.get(process)

# The runs are one after another, in the order named; each command counts
# toward the run it started in.
runs, tools = [], []
for kind, process, t0 in started:
    t1 = end_of(process)
    if t1 is not None:
        (runs if kind == "bl" else tools).append((t0, t1))
per_run = []
for r0, r1 in runs:
    own = [(t1 - t0) for t0, t1 in tools if r0 <= t0 <= r1]
    per_run.append((r1 - r0 - sum(own), len(own)))
bl_total = sum(r1 - r0 for r0, r1 in runs)
bl_runs, tool_runs = len(runs), len(tools)
passes = int(sys.argv[2])
names = sys.argv[3:]
if len(runs) == passes * len(names):
    for p in range(passes):
        mine = runs[p * len(names):(p + 1) * len(names)]
        total = sum(r1 - r0 for r0, r1 in mine)
        own = sum(own for own, _ in per_run[p * len(names):(p + 1) * len(names)])
        print(f"pass {p + 1}: {total / 1000:.2f} s, {own / len(mine):.1f} ms of bl's own a run,"
              f" {total / (total - own):.3f}x its commands' own")
tools = sum(t1 - t0 for t0, t1 in tools)
print(f"{bl_runs} bl runs ({passes} passes): {bl_total / 1000:.2f} s in all; {tool_runs} gate and worker commands: {tools / 1000:.2f} s")
print(f"bl and its cages, outside the commands' own time: {(bl_total - tools) / 1000:.2f} s"
      f" ({(bl_total - tools) / bl_runs:.1f} ms a run, {100 * (bl_total - tools) / bl_total:.0f}% of the catalog's time)")
# Where bl's own time is (printed only): runs that start no command (a
# wasm gate and a cassette worker) are all bl's; the loops that cost it
# the most.
if len(names) * passes == len(per_run):
    alone = [own for own, commands in per_run if commands == 0]
    if alone:
        print(f"  {len(alone)} runs start no command: {sum(alone):.0f} ms of bl's own, {sum(alone) / len(alone):.1f} ms a run")
    most = sorted(zip(per_run, names * passes), reverse=True)[:5]
    print("  most of bl's own: " + ", ".join(f"{name} {own:.1f} ms ({commands} commands)" for (own, commands), name in most))
print(f"the catalog's time over its commands' own, {passes} passes pooled: {bl_total / tools:.3f}x (target <= 1.15)")
if bl_total / tools > 1.15:
    print("MISSED: the catalog takes more than 1.15x its commands' own time")
    sys.exit(1)
PY
