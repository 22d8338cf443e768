"""CPU time of a command and of every process it starts, however they end: a Linux cgroup.

``getrusage(RUSAGE_CHILDREN)`` counts a process only when its parent waits for it, and a
parent that ignores SIGCHLD never does: Ray's raylet ignores it (``SigIgn`` in
``/proc/<raylet>/status`` has SIGCHLD's bit), so the CPU of every Ray worker (actors, Tune
trials, tasks) is lost to it. Measured over one suite run (``make test-cpu``, 18m03s, nothing
else running): getrusage counted 25.08 CPU-minutes, the machine's ``/proc/stat`` 34.85 over
the same span (1.88 of its 2 cores busy on average).

A cgroup counts every process put in it and all their descendants, at the kernel, whoever
reaps them: ``CpuGroup`` makes one below this process's own (so a timed command inside a timed
command is counted by both), the command joins it before it runs, and ``seconds()`` reads its
total. Where no cgroup can be made (no cpuacct hierarchy, no permission), ``make`` returns None
and the caller falls back to getrusage, saying so.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpuacct")  # cgroup v1: cpuacct.usage, nanoseconds
V2 = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))  # cgroup v2: cpu.stat


def own_path(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy with ``controller`` ("" for v2)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return None


class CpuGroup:
    """One cgroup made for a command; ``seconds()`` is the CPU time of everything that ran
    in it."""

    def __init__(self, folder: Path, version: int):
        self.folder, self.version = folder, version

    @classmethod
    def make(cls, name: str) -> CpuGroup | None:
        for version, root, controller in ((1, V1, "cpuacct"), *((2, r, "") for r in V2)):
            own = own_path(controller)
            marker = "cpuacct.usage" if version == 1 else "cpu.stat"
            if own is None or not (root / own.lstrip("/") / marker).exists():
                continue
            folder = root / own.lstrip("/") / f"{name}-{os.getpid()}"
            try:
                folder.mkdir()
            except OSError:
                continue
            return cls(folder, version)
        return None

    @classmethod
    def at(cls, folder: str | Path) -> CpuGroup:
        """The group a ``timed.py`` parent made (``$FEDSIM_CPU_GROUP``), to read it."""
        folder = Path(folder)
        return cls(folder, 1 if (folder / "cpuacct.usage").exists() else 2)

    def join(self) -> None:
        """Put this process in the group (a child calls it before exec)."""
        (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float:
        if self.version == 1:
            return int((self.folder / "cpuacct.usage").read_text()) / 1e9
        for line in (self.folder / "cpu.stat").read_text().splitlines():
            key, value = line.split()
            if key == "usage_usec":
                return int(value) / 1e6
        return 0.0

    def remove(self) -> None:
        """Remove the group; it stays while a process is still in it (timed.py names those)."""
        with contextlib.suppress(OSError):
            self.folder.rmdir()
