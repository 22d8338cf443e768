"""Never a hang, never a lost run (issue 13): a cluster address nobody answers fails in
bounded time with one line; a killed driver takes its private Ray with it; a worker that is
gone has its share run by the survivors, with the same results (a removed node:
tests/test_node_removal.py)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from helpers import NARROW_CNN, stderr_lines, untimed

from fedsim.config import load_config
from fedsim.errors import ConfigError
from fedsim.runtime.ray_cluster import connect_ray, split_host_port
from fedsim.simulation import Simulation

REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """This environment without a cluster to join: the child decides for itself."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="disabled", WANDB_MODE="offline")
    return env


# ------------------------------------------------------------------ an address nobody answers


@pytest.mark.timeout(60)  # a failure guard, not a timing: Ray alone retries for minutes
def test_refused_address_is_a_config_error_within_the_timeout():
    with pytest.raises(ConfigError) as raised:
        connect_ray("127.0.0.1:1", 1.0)  # nothing listens on port 1: Ray is never asked
    message = str(raised.value)
    assert message.startswith("runtime.address='127.0.0.1:1': no Ray cluster answered within 1 s")
    assert "(tried " in message and ":1" in message and "ray start --head" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match="RAY_ADDRESS='127.0.0.1:1'"):
        connect_ray("127.0.0.1:1", 0.2, key="RAY_ADDRESS")


def test_address_without_a_port_is_a_config_error():
    assert split_host_port("[::1]:6379") == ("::1", 6379)
    with pytest.raises(ConfigError, match="runtime.address='no-port'"):
        connect_ray("no-port", 0.2)


@pytest.mark.slow
def test_cli_with_an_unreachable_address_exits_2_with_one_line(tmp_path):
    """Ray alone retried this for minutes, printing GCS errors (issue 13)."""
    args = [
        "run",
        "configs/quickstart.yaml",
        "runtime.executor=ray",
        "runtime.address=127.0.0.1:1",
        "runtime.connect_timeout_s=3",
        "--out",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(  # the timeout guards a hang (Ray alone retried for minutes)
        [sys.executable, "-m", "fedsim.cli", *args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = stderr_lines(done.stderr)
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith(
        "fedsim: error: runtime.address='127.0.0.1:1': no Ray cluster answered within 3 s (tried "
    )
    assert not (tmp_path / "run").exists()


PROBE = textwrap.dedent(
    """
    import sys
    import ray
    from fedsim.errors import ConfigError
    from fedsim.runtime.ray_cluster import connect_ray
    try:
        connect_ray(sys.argv[1], float(sys.argv[2]))
        print("connected")
    except ConfigError as error:
        print(error)
    """
)


@pytest.mark.slow
def test_port_that_answers_but_is_no_ray_fails_quietly_in_bounded_time():
    """The port is open (not a GCS): Ray's connect is cut to the timeout, its noise kept."""
    server = socket.create_server(("0.0.0.0", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-c", PROBE, address, "4"],
            cwd=REPO,
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.close()
        for conn in accepted:
            conn.close()
    message = done.stdout.strip()
    assert message.startswith(f"runtime.address={address!r}: no Ray cluster answered within 4 s")
    assert "the port is open" in message
    # bounded by subprocess's timeout above (Ray alone: 20 attempts of ~40 s)
    assert done.stderr == ""  # Ray's GCS retry warnings do not reach the terminal


# ------------------------------------------------------------------ kill -9 of the driver

DRIVER = [
    "-m",
    "fedsim.cli",
    "run",
    "configs/quickstart.yaml",
    "runtime.executor=ray",
    "runtime.workers=1",
    "data.num_clients=4",
    "data.max_samples=800",
    "rounds=300",  # killed long before its end
]


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def names(processes: list[psutil.Process]) -> list[str]:
    """The names of those of ``processes`` still there."""
    found = []
    for proc in processes:
        try:
            found.append(proc.name())
        except psutil.NoSuchProcess:
            pass
    return found


def session_members(sid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid:
                members.append(proc)
        except (ProcessLookupError, PermissionError):
            pass
    return members


@pytest.mark.slow
def test_kill_9_of_the_driver_takes_its_ray_along(tmp_path):
    """Before: ray::DashboardAgent and ray::RuntimeEnvAgent outlived the driver by minutes.
    The driver is killed as soon as its worker actor exists (created after Ray and its
    reaper started): what runs in them then does not matter, and waiting for a round made
    the worker import torch and Lightning and train first (~8 CPU-s more)."""
    out = tmp_path / "run"
    driver = subprocess.Popen(
        [sys.executable, *DRIVER, "--out", str(out)],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own session: what it starts is found by session too
    )
    spawned: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while "WorkerActor" not in " ".join(names(spawned)):
            assert driver.poll() is None, driver.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no worker actor started in 240 s"
            time.sleep(0.2)
            spawned = psutil.Process(driver.pid).children(recursive=True)
        found = " ".join(names(spawned))
        assert "raylet" in found and "gcs_server" in found and "DashboardAgent" in found
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 10
        left = spawned
        while left and time.monotonic() < deadline:
            time.sleep(0.5)
            left = [p for p in spawned if alive(p)]
            left += [p for p in session_members(driver.pid) if p not in left and alive(p)]
        assert [p.name() for p in left] == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for proc in spawned:
            if alive(proc):
                proc.kill()


# ------------------------------------------------------------------ workers that cannot return


def small_config(*overrides: str):
    return load_config(
        None,
        [
            "data.name=mnist-5k",
            "data.max_samples=1500",  # the crash is injected: no timing, any size will do
            "data.num_clients=8",
            "data.partition.alpha=0.5",
            "rounds=3",
            "client.lr=0.05",
            *NARROW_CNN,  # the narrow FedAvgCNN: a lost worker's share is any net's
            *overrides,
        ],
    )


@pytest.mark.slow
def test_worker_that_cannot_be_replaced_leaves_its_share_to_the_survivors(ray_pool):
    """No room for a replacement (here: no time allowed to place one): the dead worker's
    share runs on the other worker, this round and the next, and nothing changes. On the two
    actors the session lends (``ray_pool``; a start of two costs ~20 CPU-s of imports): the
    survivor goes back to the holder, and the next module's ``ray_pool`` adds one actor."""
    from fedsim.runtime.ray_executor import RayExecutor

    sim = Simulation(small_config())
    runtime = dataclasses.replace(sim.cfg.runtime, executor="ray", workers=2, cpus_per_worker=0.5)
    pool = RayExecutor(runtime, sim.worker_spec, sim.data, pool=ray_pool.pop("pool"))
    try:
        assert pool.num_workers == 2
        undisturbed = sim.run(pool)
        doomed = pool.worker_info[1]["pid"]
        pool.crash_worker_on_round(1, round_idx=1)
        pool.replace_timeout_s = 0.0
        disturbed = sim.run(pool)
        assert gone(doomed)
        assert [actor is not None for actor in pool._actors] == [True, False]
        assert disturbed.summary == undisturbed.summary
        assert untimed(disturbed.history) == untimed(undisturbed.history)
        assert torch.equal(disturbed.state["params"], undisturbed.state["params"])
    finally:
        hand_back_survivors(pool, ray_pool)


def hand_back_survivors(executor: Any, held: dict[str, Any]) -> None:
    """Close ``executor`` (made from the pool ``ray_pool`` lent) and put its live actors back
    in ``held`` as the pool, for the next module (``ray_pool`` replaces the dead ones)."""
    try:
        held["pool"] = executor.detach_pool(short=True)
    except RuntimeError:  # closed, or no worker left
        pass
    executor.close()


def gone(pid: int, wait_s: float = 30.0) -> bool:
    """Whether process ``pid`` exits (or is a zombie) within ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if not alive(psutil.Process(pid)):
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.2)
    return False


def test_missing_dataset_on_ray_is_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    """Every check that needs the config, the data and the model runs before Ray starts
    (fedsim/early_start.py): a dataset that is not there is exit 2, one line, nothing
    written, and Ray is never started or joined, so no process can be left. ``fedsim run``
    runs in this process (``fedsim.cli.main``) with Ray's start and join as spies: a new
    process spent ~8 CPU-s importing torch and Lightning before the check refused it, and
    started nothing else."""
    import ray

    from fedsim.cli import main
    from fedsim.runtime import pool_start

    asked: list[str] = []

    def spy(name: str) -> Any:
        return lambda *args, **kwargs: asked.append(name) or pytest.fail(f"{name} was called")

    monkeypatch.setattr(pool_start, "start_ray", spy("start_ray"))
    monkeypatch.setattr(pool_start, "join_or_start_ray", spy("join_or_start_ray"))
    monkeypatch.setattr(ray, "init", spy("ray.init"))
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    argv = ["run", "configs/quickstart.yaml", "runtime.executor=ray", "runtime.workers=2",
            "data.name=mnist", f"data.root={tmp_path / 'nothing'}", "data.download=false",
            "--out", str(tmp_path / "run")]  # fmt: skip
    code = main(argv)
    err = capsys.readouterr().err
    lines = stderr_lines(err)
    assert code == 2 and len(lines) == 1 and "data.name='mnist'" in lines[0], err
    assert asked == []  # the data check came before Ray
    assert not (tmp_path / "run").exists() and not (tmp_path / "nothing").exists()
    started = {p.pid for p in psutil.Process().children(recursive=True)} - children
    assert started == set()
