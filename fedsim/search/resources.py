"""What one run of a search or a reproduction asks a Ray cluster for: one placement group.

Shared by ``fedsim tune`` (one group per trial) and ``ray_jobs.reproduce`` (one per
(config, seed)), so concurrent runs never oversubscribe a cluster. A run either trains its
clients in-process (the local executor: one bundle of ``runtime.cpus_per_worker`` CPUs and
``gpus_per_worker`` GPUs), or drives a Ray worker pool inside its group (one 1-CPU bundle for
the run's driver plus ``runtime.workers`` worker bundles; the number must be given, since the
group is sized before the run starts).
"""

from __future__ import annotations

from typing import Any

from fedsim.config import RuntimeConfig
from fedsim.errors import ConfigError

TRIAL_EXECUTORS = ("auto", "local", "ray")


def trial_executor_for(runtime: RuntimeConfig, requested: str) -> str:
    """``auto``: the Ray executor when runs ask for GPUs, else the local one."""
    if requested not in TRIAL_EXECUTORS:
        raise ConfigError("--trial-executor", requested, f"allowed: {', '.join(TRIAL_EXECUTORS)}")
    if requested != "auto":
        return requested
    return "ray" if (runtime.gpus_per_worker or 0) > 0 else "local"


def trial_runtime(runtime: RuntimeConfig, executor: str) -> dict[str, Any]:
    """Dotted overrides that pin a run to ``executor`` inside its own placement group."""
    if executor == "local":
        return {"runtime.executor": "local", "runtime.workers": None}
    if runtime.workers is None:
        raise ConfigError(
            "runtime.workers",
            None,
            "give a number for runs on the Ray executor inside a search or reproduction "
            "(each run's placement group is sized before it starts)",
        )
    return {"runtime.executor": "ray", "runtime.workers": runtime.workers, "runtime.address": None}


def trial_bundles(runtime: RuntimeConfig, executor: str) -> list[dict[str, float]]:
    """Placement-group bundles of one run (first bundle: the run's own process)."""
    gpus = float(runtime.gpus_per_worker or 0.0)
    worker = {"CPU": float(runtime.cpus_per_worker)}
    if gpus > 0:
        worker["GPU"] = gpus
    if executor == "local":
        return [worker]
    workers = trial_runtime(runtime, executor)["runtime.workers"]
    return [{"CPU": 1.0}] + [dict(worker) for _ in range(workers)]


def check_fits(bundles: list[dict[str, float]], cluster: dict[str, float]) -> None:
    """ConfigError when one run's bundles need more CPUs or GPUs than the whole cluster has
    (Ray would wait for them forever)."""
    for resource in ("CPU", "GPU"):
        need = sum(b.get(resource, 0.0) for b in bundles)
        have = cluster.get(resource, 0.0)
        if need > have + 1e-9:
            raise ConfigError(
                "runtime.cpus_per_worker" if resource == "CPU" else "runtime.gpus_per_worker",
                bundles[-1].get(resource),
                f"one run needs {need:g} {resource}s, the cluster has {have:g}",
            )
