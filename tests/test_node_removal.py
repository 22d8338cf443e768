"""A Ray node removed in the middle of a round changes nothing (issue 13's promise).

A 1-CPU node joins the test session's cluster (tests/ray_head.py) with one unit of a
resource only it has: the pool's first worker is one of the actors the session lends
(``ray_pool``, on the head node), the second (and any replacement) a new actor that asks
for that resource and lands on the test node. While round 0
runs, the test node is killed whole (SIGKILL to its raylet, its workers, its ``ray start``):
its actor dies with it and cannot be replaced (no node has the resource any more), so its
share runs on the surviving actor, and the run equals the in-process executor's to the bit
(as an undisturbed pool does: tests/test_ray_executor.py). One test node, not two: each
node's daemons (``ray start``, raylet, two agents) cost CPU-seconds and prove nothing more."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import psutil
import pytest
import torch
from helpers import untimed
from ray_head import kill_node, start_worker_node

from fedsim.config import load_config
from fedsim.runtime.factory import make_executor
from fedsim.simulation import Simulation

NODE_RESOURCE = "fedsim_removal_test_node"
DOOMED_ROUND = 0
JOIN_TIMEOUT_S = 240.0  # a guard against a hang, never a timing claim


def config() -> Any:
    return load_config(
        None,
        [
            "data.name=mnist-5k",
            "data.max_samples=2500",  # 4 clients a worker x ~24 steps x 2 epochs: >1 s a round
            "data.num_clients=8",
            "data.partition.alpha=0.5",
            "rounds=1",  # round 0 loses a node; the final evaluation runs on the survivor
            "client.lr=0.05",
            "client.epochs=2",
            "runtime.executor=ray",
            "runtime.workers=2",
            "runtime.cpus_per_worker=1",
        ],
    )


def start_nodes(ray: Any, address: str, count: int, logs: Any) -> list:
    """``count`` test nodes joined to the cluster. A node whose start fails (Ray gives its
    raylet 30 s to register, which a busy machine can miss) is started again, twice at most."""
    nodes = [start_worker_node(address, {NODE_RESOURCE: 1}, logs / f"node{i}.log")
             for i in range(count)]  # fmt: skip
    restarts = [0] * count
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while sum(1 for n in ray.nodes() if n["Alive"] and NODE_RESOURCE in n["Resources"]) < count:
        for i, node in enumerate(nodes):
            if node.poll() is not None:  # its start failed: the log says why
                assert restarts[i] < 2, (logs / f"node{i}.log").read_text()[-2000:]
                restarts[i] += 1
                nodes[i] = start_worker_node(address, {NODE_RESOURCE: 1},
                                             logs / f"node{i}-{restarts[i]}.log")  # fmt: skip
        if time.monotonic() > deadline:
            for node in nodes:
                kill_node(node)
            raise AssertionError(f"{count} test nodes did not join in {JOIN_TIMEOUT_S} s")
        time.sleep(0.25)
    return nodes


def node_running(pid: int, nodes: list) -> Any:
    """The node (its ``ray start`` process) whose raylet started worker process ``pid``."""
    raylet = psutil.Process(pid).parent()
    for node in nodes:
        if raylet is not None and raylet.ppid() == node.pid:
            return node
    raise LookupError(f"worker {pid}: no test node of ours started it")


def pool_on_head_and_test_node(monkeypatch: Any, lent: Any) -> Any:
    """Two workers: one of the actors the session lends (``ray_pool``; they run on the head
    node, so no start is paid for it) and a new 1-CPU actor that asks for one unit of the
    test node's resource, as any replacement will."""
    import ray

    from fedsim.runtime.pool_plan import PoolPlan
    from fedsim.runtime.pool_start import StartedPool
    from fedsim.runtime.ray_worker import WorkerActor

    def actor_class(self: StartedPool, runtime_env: dict | None = None) -> Any:
        return ray.remote(WorkerActor).options(
            num_cpus=1, num_gpus=0, max_restarts=0, max_task_retries=0,
            resources={NODE_RESOURCE: 1},
        )  # fmt: skip

    monkeypatch.setattr(StartedPool, "actor_class", actor_class)
    plan = PoolPlan(workers=2, cpus_per_worker=1.0, gpus_per_worker=0.0)
    actors = [lent.actors.pop(0), actor_class(lent).remote()]
    return StartedPool(plan=plan, actors=actors, owns_ray=False)


@pytest.mark.slow
def test_node_removed_mid_round_changes_nothing(ray_cluster, ray_pool, monkeypatch, tmp_path):
    from fedsim.runtime.ray_executor import RayExecutor

    cfg = config()
    sim = Simulation(cfg)
    torch.set_num_threads(1)  # as each 1-CPU worker: the same floating-point sums
    local = sim.run(make_executor(dataclasses.replace(cfg.runtime, executor="local"),
                                  sim.worker_spec, sim.data))  # fmt: skip

    address = ray_cluster.get_runtime_context().gcs_address
    nodes = start_nodes(ray_cluster, address, 1, tmp_path)
    try:
        lent = ray_pool["pool"]
        started = pool_on_head_and_test_node(monkeypatch, lent)
        pool = RayExecutor(
            cfg.runtime, sim.worker_spec, sim.data, pool=started, replace_timeout_s=2.0
        )
        pids = [info["pid"] for info in pool.worker_info]
        [doomed] = nodes
        assert node_running(pids[1], nodes) is doomed
        with pytest.raises(LookupError):  # the first worker runs on the head node
            node_running(pids[0], nodes)
        events: dict[str, float] = {}
        run_round = pool.run_round

        def remove_node() -> None:
            time.sleep(0.5)  # the round's shares are running
            events["removed"] = time.monotonic()
            kill_node(doomed)

        def watched_round(round_idx, broadcast, tasks):
            if round_idx != DOOMED_ROUND:
                return run_round(round_idx, broadcast, tasks)
            events["round_began"] = time.monotonic()
            threading.Thread(target=remove_node, daemon=True).start()
            try:
                return run_round(round_idx, broadcast, tasks)
            finally:
                events["round_ended"] = time.monotonic()

        pool.run_round = watched_round
        try:
            disturbed = sim.run(pool)
            live = [actor is not None for actor in pool._actors]
            if live[0]:  # the lent actor goes back to the session (ray_pool)
                lent.actors.insert(0, pool._actors[0])
                pool._actors[0] = None
        finally:
            pool.close()  # a lent actor not given back: ray_pool starts one in its place
    finally:
        for node in nodes:
            kill_node(node)

    assert events["round_began"] < events["removed"] < events["round_ended"], events
    assert live.count(False) == 1, live  # the doomed node's actor, not replaced
    assert len(disturbed.history) == 2  # 1 round + the final evaluation
    assert disturbed.summary == local.summary  # to the bit
    assert untimed(disturbed.history) == untimed(local.history)
    assert torch.equal(disturbed.state["params"], local.state["params"])
