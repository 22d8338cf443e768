"""Choose the executor from ``runtime.executor`` (local | ray)."""

from __future__ import annotations

import dataclasses

from fedsim.config import RuntimeConfig
from fedsim.data.federated import FederatedData
from fedsim.runtime.executor import Executor, LocalExecutor
from fedsim.runtime.worker import WorkerSpec


def make_executor(runtime: RuntimeConfig, spec: WorkerSpec, data: FederatedData) -> Executor:
    """Build the configured executor; the Ray one imports Ray only when chosen.

    The local executor uses ``cpus_per_worker`` torch threads, as each Ray worker does:
    CPU kernels round differently with different thread counts, and the executors must
    give the same numbers.
    """
    if runtime.executor == "ray":
        from fedsim.runtime.ray_executor import RayExecutor

        return RayExecutor(runtime, spec, data)
    if spec.num_threads is None:
        spec = dataclasses.replace(spec, num_threads=max(1, int(runtime.cpus_per_worker)))
    return LocalExecutor(spec, data)
