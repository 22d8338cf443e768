"""The worker pool's size and resources from the config and the cluster's totals.

Pure functions: no Ray or torch import (the pool is planned while the driver still imports
torch), unit-tested alone. How much work a task is lives in ``task_cost``.
"""

from __future__ import annotations

import dataclasses

from fedsim.config import RuntimeConfig
from fedsim.errors import ConfigError

WORKER_BYTES = 800 * 2**20  # one worker actor with torch and Lightning imported (~760 MB)


def check_local_workers(runtime: RuntimeConfig, memory_bytes: int) -> None:
    """ConfigError when a local Ray could not hold ``runtime.workers`` actors in this machine's
    memory (a local Ray is sized to the workers asked for, so only memory bounds it); checked
    before Ray starts. A cluster at an address is checked against its CPUs by ``plan_pool``."""
    if runtime.workers is None:
        return
    limit = max(1, memory_bytes // WORKER_BYTES)
    if runtime.workers > limit:
        raise ConfigError(
            "runtime.workers",
            runtime.workers,
            f"a local Ray on this machine holds at most {limit} workers ({memory_bytes / 2**30:.0f}"
            f" GiB of memory, ~{WORKER_BYTES / 2**30:.1f} GiB per worker); lower it or give "
            "runtime.address of a cluster",
        )


@dataclasses.dataclass(frozen=True)
class PoolPlan:
    """Resolved pool size and per-worker resources."""

    workers: int
    cpus_per_worker: float
    gpus_per_worker: float

    @property
    def threads(self) -> int:
        """Torch intra-op threads per worker: its whole CPUs, at least one."""
        return max(1, int(self.cpus_per_worker))


def plan_pool(runtime: RuntimeConfig, cluster_cpus: float, cluster_gpus: float) -> PoolPlan:
    """Workers and resources from the config and the cluster's totals (raises ConfigError).

    Defaults fill the machine: ``workers_per_gpu`` workers per GPU when the cluster has GPUs
    (each with ``1 / workers_per_gpu`` of one; not with ``device=cpu``), else one worker per
    ``cpus_per_worker`` CPUs.
    """
    gpus = runtime.gpus_per_worker
    if gpus is None:
        on_gpu = cluster_gpus > 0 and runtime.device != "cpu"
        gpus = 1.0 / runtime.workers_per_gpu if on_gpu else 0.0
    if runtime.device.startswith("cuda") and gpus == 0:
        raise ConfigError(
            "runtime.device",
            runtime.device,
            f"the cluster has {cluster_gpus:g} GPUs and runtime.gpus_per_worker={gpus:g}; "
            "allowed here: auto, cpu",
        )
    if gpus > cluster_gpus + 1e-9:
        raise ConfigError(
            "runtime.gpus_per_worker",
            gpus,
            f"the cluster has {cluster_gpus:g} GPUs: not enough for one worker; allowed here: "
            + (f"at most {cluster_gpus:g}" if cluster_gpus > 0 else "0 or null"),
        )
    cpus = runtime.cpus_per_worker
    by_cpu = int(cluster_cpus / cpus + 1e-9)
    if runtime.workers is not None:
        workers = runtime.workers
    elif gpus > 0:
        workers = min(int(cluster_gpus / gpus + 1e-9), by_cpu)
    else:
        workers = by_cpu
    if workers < 1:
        raise ConfigError(
            "runtime.cpus_per_worker",
            cpus,
            f"the cluster has {cluster_cpus:g} CPUs and {cluster_gpus:g} GPUs: not enough for "
            "one worker",
        )
    if workers * cpus > cluster_cpus + 1e-9:
        raise ConfigError(
            "runtime.workers",
            workers,
            f"{workers} workers x cpus_per_worker={cpus:g} need {workers * cpus:g} CPUs, "
            f"the cluster has {cluster_cpus:g}; lower runtime.workers or runtime.cpus_per_worker",
        )
    if workers * gpus > cluster_gpus + 1e-9:
        raise ConfigError(
            "runtime.gpus_per_worker",
            gpus,
            f"{workers} workers need {workers * gpus:g} GPUs, the cluster has {cluster_gpus:g}",
        )
    return PoolPlan(workers=workers, cpus_per_worker=cpus, gpus_per_worker=gpus)
