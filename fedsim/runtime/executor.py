"""The executor seam: run one round's client tasks somewhere, return per-worker results."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from fedsim.data.federated import FederatedData
from fedsim.runtime.worker import ClientWorker, Task, WorkerResult, WorkerSpec


class Executor(ABC):
    """Runs client tasks; results come back in a fixed worker order."""

    num_workers: int = 1

    @abstractmethod
    def run_round(
        self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]
    ) -> list[WorkerResult]:
        """Run ``tasks`` (ClientTask, GradientTask); one WorkerResult per worker."""

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release workers (and a Ray instance this executor started)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """One in-process ClientWorker: the same worker code the Ray pool runs."""

    def __init__(self, spec: WorkerSpec, data: FederatedData):
        self.worker = ClientWorker(spec, data)

    def run_round(
        self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]
    ) -> list[WorkerResult]:
        return [self.worker.run(round_idx, broadcast, tasks)]
