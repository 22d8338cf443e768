"""A worker's gradient-only work: stacked gradient tasks and curvature tasks.

``ClientWorker`` calls these for ``GradientTask`` (stacked form) and ``CurvatureTask``
(``fedsim.gradient_tasks``). A stacked task computes every gradient one client owes in a step
(one per target model in the broadcast stack) in one call, so nothing per (target, peer)
pair crosses a process boundary on its own.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from fedsim.gradient_tasks import CurvatureTask, GradientTask, TaskOutput
from fedsim.runtime.curvature import hessian_top_eigenvalue
from fedsim.runtime.training import gradient_client, seed_torch


class ClientWorker(Protocol):
    """What these functions use of the worker (``fedsim.runtime.worker.ClientWorker``): its
    module bound to the flat parameter buffer, the layout, the data, the spec, the device."""

    module: Any
    flat: torch.Tensor
    layout: Any
    data: Any
    spec: Any
    device: torch.device


def task_seed(seed: int, round_idx: int, client: int, kind: int, key: int) -> int:
    """Randomness of one task: (seed, round, client, kind, key), never the worker."""
    return int(np.random.SeedSequence([seed, round_idx, client, kind, key]).generate_state(1)[0])


def task_samples(
    worker: ClientWorker, round_idx: int, task: GradientTask | CurvatureTask, kind: int
) -> np.ndarray:
    """The task's samples: its indices (else the train split), a seeded subset if asked."""
    samples = worker.data.clients[task.client].train if task.indices is None else task.indices
    samples = np.asarray(samples, dtype=np.int64)
    if task.num_samples is not None and task.num_samples < len(samples):
        rng = np.random.default_rng([worker.spec.seed, round_idx, task.client, kind, task.key])
        samples = np.sort(rng.choice(samples, size=task.num_samples, replace=False))
    return samples


def stacked_gradients(
    worker: ClientWorker, round_idx: int, broadcast: dict[str, Any], task: GradientTask
) -> TaskOutput:
    """One gradient per ``(row, samples)`` of ``task.at``, at ``broadcast[task.stack][row]``."""
    stack = broadcast[task.stack]
    grads = torch.empty(len(task.at), worker.flat.numel(), dtype=torch.float32)  # all rows set
    losses, count = [], 0
    grad = torch.zeros_like(worker.flat)
    for i, (row, samples) in enumerate(task.at):
        samples = np.asarray(samples, dtype=np.int64)
        worker.flat.copy_(stack[row])
        seed_torch(task_seed(worker.spec.seed, round_idx, task.client, 4, row), worker.device)
        losses.append(
            gradient_client(
                worker.module,
                worker.data,
                samples,
                grad,
                worker.layout,
                batch_size=worker.spec.eval_batch_size,
                train_mode=task.train_mode,
                device=worker.device,
            )
        )
        grads[i] = grad.to("cpu")
        count += len(samples)
    return TaskOutput(
        client=task.client,
        tag=task.tag,
        gradient=grads,
        loss=float(np.mean(losses)) if losses else None,
        num_samples=count,
        losses=losses,
    )


def curvature(
    worker: ClientWorker, round_idx: int, broadcast: dict[str, Any], task: CurvatureTask
) -> TaskOutput:
    """The top Hessian eigenvalue of the client's loss at the task's parameters."""
    worker.flat.copy_(broadcast["params"] if task.params is None else task.params)
    samples = task_samples(worker, round_idx, task, 5)
    seed = task_seed(worker.spec.seed, round_idx, task.client, 5, task.key)
    eigenvalue = hessian_top_eigenvalue(
        worker.module,
        worker.data,
        samples,
        batch_size=worker.spec.eval_batch_size,
        iterations=task.iterations,
        generator=torch.Generator().manual_seed(seed),
        device=worker.device,
    )
    return TaskOutput(
        client=task.client, tag=task.tag, num_samples=len(samples), eigenvalue=eigenvalue
    )
