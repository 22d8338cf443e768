"""Choose the executor from ``runtime.executor`` (local | ray)."""

from __future__ import annotations

from fedsim.config import RuntimeConfig
from fedsim.data.federated import FederatedData
from fedsim.runtime.executor import Executor, LocalExecutor
from fedsim.runtime.worker import WorkerSpec


def make_executor(runtime: RuntimeConfig, spec: WorkerSpec, data: FederatedData) -> Executor:
    """Build the configured executor; the Ray one imports Ray only when chosen."""
    if runtime.executor == "ray":
        from fedsim.runtime.ray_executor import RayExecutor

        return RayExecutor(runtime, spec, data)
    return LocalExecutor(spec, data)
