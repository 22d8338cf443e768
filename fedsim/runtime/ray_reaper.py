"""The reaper: a private local Ray dies with the process that started it, even on kill -9.

Ray ties its GCS and raylet to the driver (the kernel kills them when it dies), and the
workers follow the raylet; but the raylet's agents (ray::DashboardAgent,
ray::RuntimeEnvAgent), seeing it gone, first report that to the dead GCS and wait out a
60 s timeout per report. The reaper, a tiny process of its own, watches the driver through
a pipe (end of file: the driver is gone, however it died), keeps a list of the private
Ray's processes and their descendants, and kills those still running when the driver dies.
"""

from __future__ import annotations

import subprocess
import sys

import ray

REAPER = r"""
import os, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the terminal is the driver's
roots = [int(arg) for arg in sys.argv[1:]]
seen = {}  # pid -> start time (a pid can be reused)

def stat(pid):
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[1]), fields[19], fields[0]  # ppid, start time, state

def survey():
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents.setdefault(stat(int(name))[0], []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    todo = [pid for pid in roots]
    while todo:
        pid = todo.pop()
        try:
            seen.setdefault(pid, stat(pid)[1])
        except (OSError, IndexError, ValueError):
            continue
        todo.extend(parents.get(pid, []))

def alive(pid, started):
    try:
        _, start, state = stat(pid)
    except (OSError, IndexError, ValueError):
        return False
    return start == started and state not in (b"Z", b"X")

while True:
    survey()
    if select.select([0], [], [], 1.0)[0] and not os.read(0, 4096):
        break  # the driver is gone
    if seen and not any(alive(pid, started) for pid, started in seen.items()):
        sys.exit(0)  # Ray was shut down; nothing left to watch
for pid, started in seen.items():
    if alive(pid, started):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""

_reapers: list[subprocess.Popen] = []  # their pipes stay open while this process lives


def local_ray_pids() -> list[int]:
    """PIDs of the processes ``ray.init`` started here (GCS, raylet, monitors)."""
    try:
        node = ray._private.worker._global_node
        return [info.process.pid for infos in node.all_processes.values() for info in infos]
    except (AttributeError, TypeError):  # private; without it there is nothing to watch
        return []


def start_reaper(pids: list[int]) -> subprocess.Popen | None:
    """Start the reaper for ``pids`` and their descendants (Linux; else None)."""
    if not pids or not sys.platform.startswith("linux"):
        return None
    for done in [r for r in _reapers if r.poll() is not None]:  # Ray shut down earlier
        _reapers.remove(done)
        done.stdin.close()
    reaper = subprocess.Popen(
        [sys.executable, "-S", "-c", REAPER, *map(str, pids)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a signal to the driver's process group spares it
    )
    _reapers.append(reaper)
    return reaper
