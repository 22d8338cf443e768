"""Run a command; then print its wall time and the CPU time of everything it started.

``python .ci/timed.py LABEL -- COMMAND...`` exits with the command's code and prints, last,
``LABEL: 11m02s wall, 17.93 CPU-minutes (every process it started; ...)``. The CPU time is
that of every process the command started, however deep and however it ended: the command
runs in a cgroup of its own (``cpu_group.py``), which the kernel charges for all of them,
Ray's workers included (their raylet reaps them itself, so ``getrusage`` never sees them).
The getrusage figure is printed beside it. Where no cgroup can be made, getrusage is all
there is and the line says so. This process is also the subreaper of what the command
starts (Linux ``PR_SET_CHILD_SUBREAPER``): processes still alive 30 s after the command ended
are named (a test left them running) and not waited for.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

from cpu_group import CpuGroup

PR_SET_CHILD_SUBREAPER = 36
LINGER_S = 30.0


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(deadline: float) -> list[int]:
    """Wait for the orphans handed to this process; the pids still alive at ``deadline``."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return []
        if pid == 0:
            if time.monotonic() > deadline:
                mine = os.getpid()
                return [int(p) for p in os.listdir("/proc") if p.isdigit() and parent(p) == mine]
            time.sleep(0.2)


def parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: timed.py LABEL -- COMMAND...", file=sys.stderr)
        return 2
    label, command = argv[0], argv[2:]
    counted_deep = become_subreaper()
    group = CpuGroup.make("fedsim-timed")
    env = {**os.environ, "FEDSIM_CPU_GROUP": str(group.folder)} if group else None
    start = time.monotonic()
    code = subprocess.call(command, env=env, preexec_fn=group.join if group else None)
    wall = time.monotonic() - start
    left = reap_orphans(time.monotonic() + LINGER_S) if counted_deep else []
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = usage.ru_utime + usage.ru_stime
    if left:
        print(f"{label}: processes still running after it ended: {left}", flush=True)
    if group is None:
        how = "getrusage, blind to Ray's workers: no cgroup could be made"
        cpu = reaped
    else:
        cpu = group.seconds()
        group.remove()
        how = "every process it started, by cgroup; getrusage, blind to Ray's workers: "
        how += f"{reaped / 60:.2f}"
    print(f"{label}: {minutes(wall)} wall, {cpu / 60:.2f} CPU-minutes ({how})", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
