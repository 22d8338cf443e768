"""The executor seam: run one round's client tasks somewhere, return per-worker results."""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from typing import Any

from fedsim.data.federated import FederatedData
from fedsim.gradient_tasks import TaskOutput
from fedsim.runtime.worker import ClientWorker, Task, WorkerResult, WorkerSpec


class Executor(ABC):
    """Runs client tasks; results come back in a fixed worker order."""

    num_workers: int = 1

    @abstractmethod
    def run_round(
        self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]
    ) -> list[WorkerResult]:
        """Run ``tasks`` (ClientTask, GradientTask); one WorkerResult per worker."""

    def exchange(
        self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]
    ) -> list[TaskOutput]:
        """Run gradient / curvature ``tasks``; their outputs in task order (tags kept).

        One ``run_round`` call: each worker gets the broadcast once and its share of the
        tasks, and returns all of its outputs together.
        """
        numbered = [dataclasses.replace(task, tag=(i, task.tag)) for i, task in enumerate(tasks)]
        outputs = [o for w in self.run_round(round_idx, broadcast, numbered) for o in w.outputs]
        outputs.sort(key=lambda o: o.tag[0])
        if [o.tag[0] for o in outputs] != list(range(len(tasks))):
            raise RuntimeError(f"round {round_idx}: {len(outputs)} outputs for {len(tasks)} tasks")
        for output in outputs:
            output.tag = output.tag[1]
        return outputs

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
