"""The Ray worker actor: one long-lived ClientWorker per actor process.

The actor body is a plain class so it carries no Ray import; ``RayExecutor`` wraps it with
``ray.remote`` and its resources. Everything it returns goes through ``to_wire``, so
parameters travel as numpy buffers and arrive on the driver as owned tensors.

Starting takes two calls: the constructor only imports torch, Lightning and the worker code
(seconds), so the pool can be started while the driver still prepares the data; ``setup``
then builds the ClientWorker from the spec and the dataset. This module itself imports
nothing heavy, so the driver can create actors before it has imported torch.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedsim.data.federated import FederatedData
    from fedsim.runtime.worker import ClientWorker, Task, WorkerSpec

# what a worker imports: torch, Lightning, the built-in models, the worker code
WORKER_MODULES = (
    "torch",
    "lightning_modules.base",
    "lightning_modules.cnn",
    "lightning_modules.resnet",
    "lightning_modules.char_lstm",
    "fedsim.runtime.worker",
    "fedsim.wire",
)


class WorkerActor:
    """Holds one LightningModule (inside a ClientWorker) for the life of the actor."""

    def __init__(self) -> None:
        for name in WORKER_MODULES:  # the slow part of a start, overlapped with the driver's
            importlib.import_module(name)
        self.worker: ClientWorker | None = None
        self._memory_fraction: float | None = None
        self._crash_round: int | None = None

    def setup(self, spec: WorkerSpec, data: FederatedData, gpu_fraction: float = 0.0) -> None:
        """Build the worker's module for ``spec``; ``data`` is a zero-copy object-store view."""
        import torch

        from fedsim.runtime.worker import ClientWorker

        if spec.num_threads:
            torch.set_num_threads(spec.num_threads)
        if gpu_fraction > 0 and torch.cuda.is_available():
            # Ray's GPU fractions are bookkeeping only: cap this process's CUDA memory to match.
            self._memory_fraction = min(gpu_fraction, 1.0)
            torch.cuda.set_per_process_memory_fraction(self._memory_fraction)
            spec = dataclasses.replace(spec, device="cuda")
        self.worker = ClientWorker(spec, data)

    def ready(self) -> dict[str, Any]:
        """Returns once the module is built: process id, device, torch threads, and whether
        the dataset is a read-only view of the object store (zero-copy) rather than a copy."""
        import torch

        worker = self._worker()
        return {
            "pid": os.getpid(),
            "device": str(worker.device),
            "cuda_memory_fraction": self._memory_fraction,  # None: not on a GPU
            "threads": torch.get_num_threads(),
            "niceness": os.nice(0),
            "dataset_shared": not worker.data.dataset.inputs.flags.writeable,
        }

    def run(self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]) -> Any:
        """This worker's share of the round; one WorkerResult, tensors as numpy buffers."""
        from fedsim.wire import to_wire

        worker = self._worker()
        if self._crash_round == round_idx:
            worker.run(round_idx, broadcast, tasks[:1])  # some work is done, then lost
            os._exit(1)
        result = worker.run(round_idx, broadcast, tasks)
        # gradient-task outputs (SP-CACW: targets x peers gradients a step) arrive as
        # read-only views of the object store; the driver reads them once (TaskOutput)
        outputs, result.outputs = result.outputs, []
        wired = to_wire(result, copy=True)
        wired.outputs = to_wire(outputs)
        return wired

    def crash_on_round(self, round_idx: int | None) -> None:
        """Test hook: die (os._exit) in the middle of the ``run`` call of round ``round_idx``."""
        self._crash_round = round_idx

    def _worker(self) -> ClientWorker:
        if self.worker is None:
            raise RuntimeError("WorkerActor.setup(spec, data) was not called")
        return self.worker
