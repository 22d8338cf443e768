"""The suite's closing figures (.ci/timed.py): the CPU of every process the command started
is counted, however it ended (orphaned on the way, or reaped by a parent that ignores SIGCHLD,
as Ray's raylet reaps its workers), and the command's exit code kept."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

TIMED = Path(__file__).resolve().parents[1] / ".ci" / "timed.py"
# a grandchild that outlives its parent and burns ~1.5 s of CPU
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.5: pass"
ORPHAN = f"(python3 -c '{BURN}') & exit 3"
# a parent that ignores SIGCHLD (as Ray's raylet does): its child is reaped by the kernel,
# so getrusage never counts the child's ~1.5 s
IGNORING = (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
    f"child = subprocess.Popen([sys.executable, '-c', {BURN!r}])\n"
    "while os.path.exists(f'/proc/{child.pid}'): time.sleep(0.05)\n"
)
LINE = r"suite: 0m\d\ds wall, ([\d.]+) CPU-minutes \((.*)\)"


def timed(*command: str) -> tuple[int, re.Match[str]]:
    done = subprocess.run([sys.executable, str(TIMED), "suite", "--", *command],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    last = done.stdout.strip().splitlines()[-1]
    found = re.fullmatch(LINE, last)
    assert found, last
    return done.returncode, found


def test_an_orphans_cpu_is_counted_and_the_exit_code_kept():
    code, found = timed("bash", "-c", ORPHAN)
    assert code == 3
    assert float(found[1]) >= 0.02, found[0]  # 1.5 s = 0.025 min: the orphan was counted


def test_a_child_its_parent_never_waits_for_is_counted():
    code, found = timed(sys.executable, "-c", IGNORING)
    assert code == 0
    if "no cgroup could be made" in found[2]:
        pytest.skip(f"no cgroup on this machine: {found[0]}")
    assert found[2].startswith("every process it started, by cgroup; getrusage"), found[0]
    reaped = float(found[2].rsplit(": ", 1)[1])
    assert float(found[1]) >= 0.02 > reaped, found[0]  # the cgroup saw the child, getrusage not


def test_the_cpu_report_attributes_each_second_to_the_tests_running():
    """Two test processes: each one's own CPU goes to its test; the rest of the tree's (Ray
    workers, the head) is shared by the tests running then; CPU outside any test is apart."""
    sys.path.insert(0, str(TIMED.parent))
    from test_cpu import attribute, intervals

    samples = [{"t": 0.0, "tree": 0.0, "w": {"gw0": 0.0, "gw1": 0.0}},
               {"t": 1.0, "tree": 4.0, "w": {"gw0": 1.0, "gw1": 1.0}},
               {"t": 2.0, "tree": 10.0, "w": {"gw0": 3.0, "gw1": 2.0}}]  # fmt: skip
    spans = {"gw0": intervals([{"t": 0.0, "id": "a", "e": "start"},
                               {"t": 2.5, "id": "a", "e": "end"}]),
             "gw1": intervals([{"t": 1.2, "id": "b", "e": "start"},
                               {"t": 2.5, "id": "b", "e": "end"}])}  # fmt: skip
    own, other, idle = attribute(samples, spans)
    # second 1: a ran alone (gw1 idle: 1 s outside any test), the rest 4 - 2 = 2 is a's;
    # second 2: a 2, b 1 of their own, the rest 6 - 3 = 3 split between them
    assert own == {"a": 3.0, "b": 1.0}
    assert other == {"a": 3.5, "b": 1.5}
    assert idle == 1.0
