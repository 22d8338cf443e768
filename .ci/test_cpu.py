"""Where the suite's CPU goes, test by test, Ray workers and subprocesses included.

``pytest --durations`` gives wall time in the test process only; most of the suite's CPU is
spent elsewhere too (Ray worker actors, ``fedsim run`` subprocesses, the Ray head). Loaded as
a pytest plugin (``make test-cpu``), this writes under ``$TEST_CPU_DIR`` (default
``.test-cpu/``):

- ``log_<worker>.jsonl``: each test's start and end time, per test process;
- ``samples.jsonl``: once a second, from the controller, the CPU seconds of every pytest
  process (its own and its reaped children's) and of everything the suite runs: the cgroup
  ``.ci/timed.py`` puts it in (``cpu_group.py``), or without one the live process tree under
  ``$TEST_CPU_ROOT`` (default: the controller), which loses a Ray worker's CPU when it exits.

``python .ci/test_cpu.py [DIR]`` then attributes them (``attribute``): each second, a test
process's own CPU goes to the test it was running, and the rest of the tree's (Ray workers,
the head, subprocesses not yet reaped) is shared equally among the tests running then.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cpu_group import CpuGroup

OUT = Path(os.environ.get("TEST_CPU_DIR", ".test-cpu"))
PERIOD_S = 1.0


def process_cpu(process: Any) -> float:
    """User + system seconds of a psutil process and of the children it has reaped."""
    t = process.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def tree_cpu(root: Any) -> float:
    """``process_cpu`` summed over ``root`` and every live descendant."""
    import psutil

    total = process_cpu(root)
    for child in root.children(recursive=True):
        try:
            total += process_cpu(child)
        except psutil.Error:
            pass
    return total


def _sample_forever(root_pid: int) -> None:
    """Once a second: each test process's CPU, and the whole tree's: the cgroup ``timed.py``
    made where there is one (every process, Ray's workers included, however reaped: they
    vanish from a walk of the live tree, their CPU with them), else that walk."""
    import psutil

    root = psutil.Process(root_pid)
    group = os.environ.get("FEDSIM_CPU_GROUP")
    tree = CpuGroup.at(group).seconds if group else lambda: tree_cpu(root)
    with open(OUT / "samples.jsonl", "a") as out:
        while True:
            workers = {}
            for pid_file in OUT.glob("pid_*"):
                try:
                    pid = int(pid_file.read_text())
                    workers[pid_file.name[4:]] = process_cpu(psutil.Process(pid))
                except (ValueError, psutil.Error):
                    pass
            try:
                out.write(json.dumps({"t": time.time(), "tree": tree(), "w": workers}))
                out.write("\n")
                out.flush()
            except psutil.Error:
                pass
            time.sleep(PERIOD_S)


def pytest_configure(config: Any) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker is None:  # the controller (or a lone process) samples
        root = int(os.environ.get("TEST_CPU_ROOT", os.getpid()))
        threading.Thread(target=_sample_forever, args=(root,), daemon=True).start()
        worker = "main"
    (OUT / f"pid_{worker}").write_text(str(os.getpid()))
    config._test_cpu_log = open(OUT / f"log_{worker}.jsonl", "a")  # noqa: SIM115


def _log(config: Any, nodeid: str, event: str) -> None:
    config._test_cpu_log.write(json.dumps({"t": time.time(), "id": nodeid, "e": event}) + "\n")
    config._test_cpu_log.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    _log(item.config, item.nodeid, "start")
    yield
    _log(item.config, item.nodeid, "end")


# ------------------------------------------------------------------ the report


def intervals(log_lines: list[dict]) -> list[tuple[float, float, str]]:
    """(start, end, test id) of one process's tests, in start order."""
    started, done = {}, []
    for event in log_lines:
        if event["e"] == "start":
            started[event["id"]] = event["t"]
        elif event["id"] in started:
            done.append((started.pop(event["id"]), event["t"], event["id"]))
    return sorted(done)


def _running(spans: list[tuple[float, float, str]], starts: list[float], t: float) -> str | None:
    i = bisect.bisect_right(starts, t) - 1
    return spans[i][2] if i >= 0 and spans[i][0] <= t <= spans[i][1] else None


def attribute(
    samples: list[dict], spans: dict[str, list[tuple[float, float, str]]]
) -> tuple[dict[str, float], dict[str, float], float]:
    """(own CPU by test, the rest of the tree's by test, CPU no test was running for)."""
    own: dict[str, float] = collections.defaultdict(float)
    other: dict[str, float] = collections.defaultdict(float)
    starts = {w: [s[0] for s in lst] for w, lst in spans.items()}
    idle = 0.0
    for before, after in itertools.pairwise(samples):
        middle = (before["t"] + after["t"]) / 2
        rest, tests = after["tree"] - before["tree"], []
        for worker, cpu in after["w"].items():
            used = cpu - before["w"].get(worker, cpu)
            rest -= used
            test = _running(spans.get(worker, []), starts.get(worker, []), middle)
            if test is None:
                idle += used
            else:
                own[test] += used
                tests.append(test)
        for test in tests:
            other[test] += rest / len(tests)
        idle += 0.0 if tests else rest
    return dict(own), dict(other), idle


def report(folder: Path, top: int = 40) -> str:
    samples = [json.loads(line) for line in open(folder / "samples.jsonl") if line.strip()]
    spans = {log.stem[4:]: intervals([json.loads(line) for line in open(log)])
             for log in folder.glob("log_*.jsonl")}  # fmt: skip
    own, other, idle = attribute(samples, spans)
    total = {t: own.get(t, 0.0) + other.get(t, 0.0) for t in set(own) | set(other)}
    by_file: dict[str, float] = collections.Counter()
    for test, cpu in total.items():
        by_file[test.split("::")[0]] += cpu
    tree = samples[-1]["tree"] - samples[0]["tree"] if samples else 0.0
    lines = [f"{tree / 60:.1f} CPU-minutes in the tree, {idle / 60:.1f} outside any test",
             "CPU-s  file"]  # fmt: skip
    lines += [f"{cpu:6.1f}  {name}" for name, cpu in by_file.most_common(top)]
    lines.append("CPU-s  (own + elsewhere)  test")
    for test in sorted(total, key=total.get, reverse=True)[:top]:
        lines.append(f"{total[test]:6.1f}  ({own.get(test, 0):.1f} + {other.get(test, 0):.1f})"
                     f"  {test}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
