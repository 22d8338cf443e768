"""The Ray worker actor: one long-lived ClientWorker per actor process.

The actor body is a plain class so it carries no Ray import; ``RayExecutor`` wraps it with
``ray.remote`` and its resources. Everything it returns goes through ``to_wire``, so
parameters travel as numpy buffers and arrive on the driver as owned tensors.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from fedsim.data.federated import FederatedData
from fedsim.runtime.worker import ClientWorker, Task, WorkerSpec
from fedsim.wire import to_wire


class WorkerActor:
    """Holds one LightningModule (inside a ClientWorker) for the life of the actor."""

    def __init__(self, spec: WorkerSpec, data: FederatedData, gpu_fraction: float = 0.0):
        if spec.num_threads:
            torch.set_num_threads(spec.num_threads)
        self._memory_fraction: float | None = None
        if gpu_fraction > 0 and torch.cuda.is_available():
            # Ray's GPU fractions are bookkeeping only: cap this process's CUDA memory to match.
            self._memory_fraction = min(gpu_fraction, 1.0)
            torch.cuda.set_per_process_memory_fraction(self._memory_fraction)
            spec = dataclasses.replace(spec, device="cuda")
        self.worker = ClientWorker(spec, data)
        self._crash_round: int | None = None

    def ready(self) -> dict[str, Any]:
        """Returns once the module is built: process id, device, torch threads, and whether
        the dataset is a read-only view of the object store (zero-copy) rather than a copy."""
        return {
            "pid": os.getpid(),
            "device": str(self.worker.device),
            "cuda_memory_fraction": self._memory_fraction,  # None: not on a GPU
            "threads": torch.get_num_threads(),
            "niceness": os.nice(0),
            "dataset_shared": not self.worker.data.dataset.inputs.flags.writeable,
        }

    def run(self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]) -> Any:
        """This worker's share of the round; one WorkerResult, tensors as numpy buffers."""
        if self._crash_round == round_idx:
            self.worker.run(round_idx, broadcast, tasks[:1])  # some work is done, then lost
            os._exit(1)
        return to_wire(self.worker.run(round_idx, broadcast, tasks), copy=True)

    def crash_on_round(self, round_idx: int | None) -> None:
        """Test hook: die (os._exit) in the middle of the ``run`` call of round ``round_idx``."""
        self._crash_round = round_idx
