"""The test session's one Ray cluster, shared by every test process (pytest-xdist's two).

The first process that needs Ray starts a head node in a process of its own (``ray start
--head --block`` under the watchdog ``main`` below) and writes its address to a file in the
session's temporary folder; the others read it and join, as a job joins a cluster. The
head belongs to the session, not to a test process: pytest's controller stops it when the
session ends (``stop_session_head``), and the watchdog stops it if that process is gone
first (a killed pytest leaves no Ray behind). One head instead of one per process: ~4 s of
start-up and the head's idle processes (GCS, raylet, agents) once, not twice.

Run as a script: ``python tests/ray_head.py OWNER_PID RAY_START_ARGS...``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STATE = "ray-head.json"  # in the session's base temporary folder
LOCK = "ray-head.lock"
START_TIMEOUT_S = 120.0  # a guard against a hang on a busy machine, never a timing claim
# a node that is gone is declared dead after ~5 s, not Ray's default ~15 s (a 3 s check, 5
# misses): tests/test_node_removal.py tests what fedsim does then, not the wait
HEALTH_CHECK = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5}
# Ray's raylet starts one idle Python worker per CPU when the first driver registers (6 in
# `make test`), whether any task comes or not; the session's actors and tasks start their
# own workers as they need them (each ~0.7 CPU-s of `import ray` before any work)
NO_PRESTART = {"RAY_prestart_worker_first_driver": "0"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def ray_command() -> str:
    """The ``ray`` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def start_head(folder: Path, owner_pid: int, num_cpus: int, env: dict[str, str]) -> str:
    """Start the shared head (once, under a lock held by the caller); its GCS address."""
    port = free_port()
    args = [ray_command(), "start", "--head", "--block", f"--port={port}",
            "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus}", "--num-gpus=0",
            "--include-dashboard=false", f"--object-store-memory={256 * 2**20}",
            "--disable-usage-stats", f"--system-config={json.dumps(HEALTH_CHECK)}"]  # fmt: skip
    log = open(folder / "ray-head.log", "w")  # noqa: SIM115 - the head's own output
    watchdog = subprocess.Popen(
        [sys.executable, __file__, str(owner_pid), *args],
        env={**NO_PRESTART, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers(address):
        if watchdog.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the session's Ray head did not start:\n{tail(folder)}")
        time.sleep(0.25)
    (folder / STATE).write_text(json.dumps({"address": address, "watchdog": watchdog.pid}))
    return address


def answers(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False


def tail(folder: Path) -> str:
    path = folder / "ray-head.log"
    return path.read_text()[-3000:] if path.exists() else ""


def session_head(folder: Path) -> str | None:
    """The address of the head a process of this session started, if any."""
    path = folder / STATE
    return json.loads(path.read_text())["address"] if path.exists() else None


def stop_session_head(folder: Path, wait_s: float = 30.0) -> None:
    """Stop the session's head (pytest's controller, at the session's end): the watchdog
    stops Ray and exits."""
    path = folder / STATE
    if not path.exists():
        return
    pid = json.loads(path.read_text())["watchdog"]
    path.unlink()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) is gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return True


def main(owner_pid: int, args: list[str]) -> int:
    """Run ``ray start --head --block`` until the owner is gone or SIGTERM comes; then end
    it and everything it started (its process group: this session, ours alone)."""
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    head = subprocess.Popen(args)
    while not stopping and head.poll() is None and alive(owner_pid):
        time.sleep(0.5)
    if head.poll() is None:
        head.terminate()  # ray start --block ends its node's processes on SIGTERM
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            head.kill()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.killpg(os.getpgid(0), signal.SIGKILL)  # whatever is left of the session's Ray
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2:]))


def start_worker_node(address: str, resources: dict[str, float], log: Path) -> subprocess.Popen:
    """A 1-CPU node joining the cluster at ``address`` (``ray start --block``), in a process
    session of its own, so ``kill_node`` can take it away whole, as a machine that dies."""
    args = [ray_command(), "start", "--block", f"--address={address}",
            "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0",
            f"--resources={json.dumps(resources)}", "--disable-usage-stats"]  # fmt: skip
    with open(log, "w") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill_node(node: subprocess.Popen) -> None:
    """SIGKILL to the node's whole process session: ``ray start``, raylet, its workers."""
    try:
        os.killpg(node.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    node.wait()
