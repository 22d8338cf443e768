"""Run a command; then print its wall time and the CPU time of everything it started.

``python .ci/timed.py LABEL -- COMMAND...`` exits with the command's code and prints, last,
``LABEL: 11m02s wall, 17.93 CPU-minutes (user 16.41 + system 1.52)``. The CPU time is that of
every process the command started, however deep: this process is their subreaper (Linux
``PR_SET_CHILD_SUBREAPER``), so a process orphaned on the way (a Ray worker whose raylet
went first) is reaped here and counted, not lost to init. Processes still alive 30 s after
the command ended are named (a test left them running) and not waited for.
"""

from __future__ import annotations

import ctypes
import os
import resource
import subprocess
import sys
import time

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
    start = time.monotonic()
    code = subprocess.call(command)
    wall = time.monotonic() - start
    left = reap_orphans(time.monotonic() + LINGER_S) if counted_deep else []
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    if left:
        print(f"{label}: processes still running after it ended: {left}", flush=True)
    print(f"{label}: {minutes(wall)} wall, {cpu / 60:.2f} CPU-minutes (user "
          f"{usage.ru_utime / 60:.2f} + system {usage.ru_stime / 60:.2f})", flush=True)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
