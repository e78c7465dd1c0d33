"""Runs a command and prints its CPU seconds two ways: the whole of it
(user + system of the command and every process it waited for, from
wait4, as /usr/bin/time counts it), and the command's own process alone
(its threads, not its children), from /proc/PID/stat read once it has
exited and before it is reaped, when its counters are final.

The whole is what the issue's target subtracts the workers-alone run
from. The own part says how much of that is bl itself, without leaning
on the assumption that a worker costs as much inside bl as alone.

    python cpu_split.py COMMAND...   ->  "TOTAL OWN" (seconds), exit code kept
"""

import os
import subprocess
import sys

TICK = os.sysconf("SC_CLK_TCK")


def own_seconds(pid):
    """utime + stime of `pid`, read after it exited and before it is
    reaped (waitid with WNOWAIT), when its counters are final."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    with open(f"/proc/{pid}/stat") as f:
        # The fields after the command's name, which may hold spaces.
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main():
    child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    own = own_seconds(child.pid)
    _, status, usage = os.wait4(child.pid, 0)
    total = usage.ru_utime + usage.ru_stime
    print(f"{total:.4f} {own:.4f}")
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
