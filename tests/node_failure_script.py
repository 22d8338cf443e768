"""A Ray node removed in the middle of a round (run by tests/test_ray_resilience.py).

Ray's multi-node test cluster on this machine: a head with no CPUs and two 1-CPU nodes, one
worker actor on each. The run, with one node removed while round 1 is in flight (its actor
dies with it and cannot be replaced: no room left), is compared with the in-process (local)
executor's run on one thread, which an undisturbed pool equals to the bit
(tests/test_ray_executor.py). Prints one JSON line.
Run in its own process: the test cluster cannot share a process with another Ray.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_worker_niceness", "0")

import psutil  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

from fedsim.config import load_config  # noqa: E402
from fedsim.runtime.factory import make_executor  # noqa: E402
from fedsim.runtime.ray_executor import RayExecutor  # noqa: E402
from fedsim.simulation import Simulation  # noqa: E402

TIMING_KEYS = ("seconds", "train_seconds_max_worker")
DOOMED_ROUND = 1


def untimed(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in history]


def node_of(pid: int, nodes: list) -> object:
    """The cluster node whose raylet started worker process ``pid``."""
    parent = psutil.Process(pid).ppid()
    for node in nodes:
        if node.all_processes["raylet"][0].process.pid == parent:
            return node
    raise LookupError(f"worker {pid}: no raylet of ours is its parent")


def main() -> dict:
    replace_timeout_s = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    cfg = load_config(
        None,
        [
            "data.name=mnist-5k",
            "data.max_samples=2500",  # 4 clients a worker x ~24 steps x 2 epochs: >1 s a round
            "data.num_clients=8",
            "data.partition.alpha=0.5",
            "rounds=2",  # round 1 loses a node; the final evaluation runs on the survivor
            "client.lr=0.05",
            "client.epochs=2",
            "runtime.executor=ray",
            "runtime.workers=2",
            "runtime.cpus_per_worker=1",
        ],
    )
    sim = Simulation(cfg)
    torch.set_num_threads(1)  # as each 1-CPU worker: the same floating-point sums
    local_runtime = dataclasses.replace(cfg.runtime, executor="local")
    local = sim.run(make_executor(local_runtime, sim.worker_spec, sim.data))

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            # the removed node is declared dead after ~1.5 s, not Ray's default ~15 s (a
            # 3 s health check, 5 misses): the test is what fedsim does then, not the wait
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level=logging.WARNING)
    try:
        pool = RayExecutor(
            cfg.runtime, sim.worker_spec, sim.data, replace_timeout_s=replace_timeout_s
        )
        pids = [info["pid"] for info in pool.worker_info]
        doomed_node = node_of(pids[1], nodes)
        assert node_of(pids[0], nodes) is not doomed_node, "both workers on one node"
        events: dict[str, float] = {}
        run_round = pool.run_round

        def remove_node() -> None:
            time.sleep(0.5)  # the round's shares are running
            events["removed"] = time.monotonic()
            cluster.remove_node(doomed_node, allow_graceful=False)

        def watched_round(round_idx, broadcast, tasks):
            if round_idx == DOOMED_ROUND:
                events["round_began"] = time.monotonic()
                threading.Thread(target=remove_node, daemon=True).start()
                try:
                    return run_round(round_idx, broadcast, tasks)
                finally:
                    events["round_ended"] = time.monotonic()
            return run_round(round_idx, broadcast, tasks)

        pool.run_round = watched_round
        try:
            disturbed = sim.run(pool)
            live = [actor is not None for actor in pool._actors]
        finally:
            pool.close()
    finally:
        ray.shutdown()
        cluster.shutdown()

    return {
        "removed_mid_round": events["round_began"] < events["removed"] < events["round_ended"],
        "round_seconds": round(events["round_ended"] - events["round_began"], 2),
        "recovery_seconds": round(events["round_ended"] - events["removed"], 2),
        "live_workers_after": live,
        "rounds_done": len(disturbed.history),
        "same_as_local": (
            disturbed.summary == local.summary
            and untimed(disturbed.history) == untimed(local.history)
            and torch.equal(disturbed.state["params"], local.state["params"])
        ),
        "final_acc": disturbed.summary["final"]["acc_weighted"],
        "local_final_acc": local.summary["final"]["acc_weighted"],
    }


if __name__ == "__main__":
    print(json.dumps(main()), flush=True)
