"""Choose the executor from ``runtime.executor`` (local | ray)."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import torch

from fedsim.config import RuntimeConfig
from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError
from fedsim.runtime.executor import Executor, LocalExecutor
from fedsim.runtime.worker import WorkerSpec

if TYPE_CHECKING:
    from fedsim.runtime.pool_start import StartedPool


def make_executor(
    runtime: RuntimeConfig,
    spec: WorkerSpec,
    data: FederatedData,
    pool: StartedPool | None = None,
) -> Executor:
    """Build the configured executor; the Ray one imports Ray only when chosen.

    ``pool``: Ray and the actors started ahead (``fedsim.runtime.pool_start``), for Ray.

    The local executor uses ``cpus_per_worker`` torch threads, as each Ray worker does:
    CPU kernels round differently with different thread counts, and the executors must
    give the same numbers.
    """
    if runtime.executor == "ray":
        from fedsim.runtime.ray_executor import RayExecutor

        return RayExecutor(runtime, spec, data, pool=pool)
    if spec.num_threads is None:
        spec = dataclasses.replace(spec, num_threads=max(1, int(runtime.cpus_per_worker)))
    return LocalExecutor(dataclasses.replace(spec, device=local_device(runtime.device)), data)


def check_runtime(runtime: RuntimeConfig) -> None:
    """ConfigError for runtime settings this machine can already tell are impossible.

    Checked before any run folder or Ray worker exists: a CUDA device the local executor
    cannot see, or GPUs per worker when no cluster address is given and this machine has no
    GPU (a local Ray would have none to give).
    """
    if runtime.executor == "local":
        local_device(runtime.device)
        return
    if runtime.address is not None or os.environ.get("RAY_ADDRESS"):
        return  # the cluster's resources are checked once connected
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0 and (runtime.gpus_per_worker or 0) > 0:
        raise ConfigError(
            "runtime.gpus_per_worker",
            runtime.gpus_per_worker,
            "this machine has no GPU and no runtime.address names a cluster; allowed here: "
            "0 or null",
        )
    if visible == 0 and runtime.device.startswith("cuda"):
        raise ConfigError(
            "runtime.device",
            runtime.device,
            "this machine has no GPU and no runtime.address names a cluster; allowed here: "
            "auto, cpu",
        )


def local_device(device: str) -> str:
    """``runtime.device`` for this process: ``auto`` is CUDA where a GPU is visible.

    Raises ConfigError for a CUDA device this process cannot see (before any work starts).
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        index = int(device[5:] or 0)
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if index >= visible:
            raise ConfigError(
                "runtime.device",
                device,
                f"this process sees {visible} CUDA devices; allowed here: auto, cpu"
                + (", cuda, cuda:0" if visible else "")
                + (f"..cuda:{visible - 1}" if visible > 1 else ""),
            )
    return device
