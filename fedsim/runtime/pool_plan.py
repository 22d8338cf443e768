"""The worker pool's size and resources, and how much work a task is (to balance workers).

Pure functions of the config and the cluster's totals: no Ray import, unit-tested alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fedsim.config import RuntimeConfig
from fedsim.errors import ConfigError
from fedsim.runtime.worker import ClientTask, CurvatureTask, GradientTask, Task

TRAIN_COST_PER_SAMPLE = 3.0  # forward + backward ~ 3 forwards; evaluation costs 1 per sample
TASK_COST_FIXED = 1.0  # per task, so that tiny tasks still spread


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


def task_cost(task: Task, train_sizes: np.ndarray, test_sizes: np.ndarray, epochs: int) -> float:
    """Relative compute of a task, in sample-forward units (used to balance workers)."""
    cost = TASK_COST_FIXED
    if isinstance(task, ClientTask):
        if task.train:
            cost += TRAIN_COST_PER_SAMPLE * epochs * float(train_sizes[task.client])
        if task.evaluate:
            cost += float(test_sizes[task.client])
    elif isinstance(task, GradientTask) and task.stack is not None:
        cost += TRAIN_COST_PER_SAMPLE * sum(len(samples) for _, samples in task.at)
    elif isinstance(task, CurvatureTask):
        n = len(task.indices) if task.indices is not None else int(train_sizes[task.client])
        n = n if task.num_samples is None else min(n, task.num_samples)
        cost += 2 * TRAIN_COST_PER_SAMPLE * task.iterations * n  # one HVP ~ two backprops
    elif isinstance(task, GradientTask):
        n = len(task.indices) if task.indices is not None else int(train_sizes[task.client])
        if task.num_samples is not None:
            n = min(n, task.num_samples)
        cost += TRAIN_COST_PER_SAMPLE * n
    return cost
