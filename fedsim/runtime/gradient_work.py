"""A worker's gradient-only work: stacked gradient tasks and curvature tasks.

``ClientWorker`` calls these for ``GradientTask`` (plain and stacked) and ``CurvatureTask``
(``fedsim.gradient_tasks``). A stacked task computes every gradient of its ``at`` entries in
one call, so nothing per entry crosses a process boundary on its own. Entries at one model
row with equal sample counts are one ``torch.func.vmap`` of ``grad`` over their minibatches
(``batched_gradients``), when the model allows it (no buffers, no dropout, no recurrent
layers: ``vmappable``); otherwise, entry after entry. Both depend on the task alone, never on
the worker or on the other tasks, so every executor gives the same bits.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from fedsim.gradient_tasks import CurvatureTask, GradientTask, TaskOutput, gram
from fedsim.runtime.curvature import hessian_top_eigenvalue
from fedsim.runtime.training import gradient_client, seed_torch
from fedsim.streams import (
    CURVATURE_KIND,
    GRADIENT_SUBSET_KIND,
    STACKED_GRADIENT_KIND,
    torch_seed,
)


class ClientWorker(Protocol):
    """What these functions use of the worker (``fedsim.runtime.worker.ClientWorker``): its
    module bound to the flat parameter buffer, the layout, the data, the spec, the device."""

    module: Any
    flat: torch.Tensor
    layout: Any
    data: Any
    spec: Any
    device: torch.device
    vmappable: bool  # the module allows batched gradients (``vmappable``)


def gradient(
    worker: ClientWorker,
    round_idx: int,
    broadcast: dict[str, Any],
    task: GradientTask,
    client_seed: int,
) -> TaskOutput:
    """One gradient task: the mean CE gradient at its parameters (default the broadcast's)
    on its samples; a stacked task goes to ``stacked_gradients``. ``client_seed``: the
    client's (dropout), from (seed, round, client) as in its training."""
    if task.stack is not None:
        return stacked_gradients(worker, round_idx, broadcast, task)
    worker.flat.copy_(broadcast["params"] if task.params is None else task.params)
    samples = task_samples(worker, round_idx, task, GRADIENT_SUBSET_KIND)
    seed_torch(client_seed, worker.device)
    grad = torch.zeros_like(worker.flat)
    loss = gradient_client(
        worker.module,
        worker.data,
        samples,
        grad,
        worker.layout,
        batch_size=worker.spec.client.eval_batch_size,
        train_mode=task.train_mode,
        device=worker.device,
    )
    return TaskOutput(
        client=task.client, tag=task.tag, gradient=grad.to("cpu"), loss=loss,
        num_samples=len(samples),
    )  # fmt: skip


def task_samples(
    worker: ClientWorker, round_idx: int, task: GradientTask | CurvatureTask, kind: int
) -> np.ndarray:
    """The task's samples: its indices (else the train split), a seeded subset if asked."""
    samples = worker.data.split(task.client).train if task.indices is None else task.indices
    samples = np.asarray(samples, dtype=np.int64)
    if task.num_samples is not None and task.num_samples < len(samples):
        rng = np.random.default_rng(
            [worker.spec.client.seed, round_idx, task.client, kind, task.key]
        )
        samples = np.sort(rng.choice(samples, size=task.num_samples, replace=False))
    return samples


_RANDOM_OR_STATEFUL = (nn.modules.dropout._DropoutNd, nn.RNNBase, nn.modules.batchnorm._NormBase)


def vmappable(module: nn.Module) -> bool:
    """Whether per-entry gradients may be one vmap: the model has no buffers (running
    statistics), no dropout and no recurrent layers (fused kernels without batching rules)."""
    if next(module.buffers(), None) is not None:
        return False
    return not any(isinstance(m, _RANDOM_OR_STATEFUL) for m in module.modules())


def batched_gradients(
    worker: ClientWorker, samples: list[np.ndarray], train_mode: bool
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Gradients of the mean CE loss on each of ``samples`` (equal sizes) at the module's
    current parameters, as one ``vmap(grad)``: ({name: (E, *shape)}, losses (E,))."""
    module = worker.module
    module.train(train_mode)
    params = {name: p.detach() for name, p in module.named_parameters()}
    n = len(samples[0])
    x, y = worker.data.batch(np.concatenate(samples))
    # a fresh contiguous buffer: the same strides (so the same kernels) on every worker
    shape = (len(samples), n, *x.shape[1:])
    x = torch.empty(shape, dtype=x.dtype).copy_(x.reshape(shape))
    y = y.view(len(samples), n)
    if worker.device.type != "cpu":
        x, y = x.to(worker.device), y.to(worker.device)

    def loss(p: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        logits = torch.func.functional_call(module, p, (xs,))
        return nn.functional.cross_entropy(logits, ys, reduction="sum") / n

    grads, losses = torch.func.vmap(torch.func.grad_and_value(loss), in_dims=(None, 0, 0))(
        params, x, y
    )
    return grads, losses


def stacked_gradients(
    worker: ClientWorker, round_idx: int, broadcast: dict[str, Any], task: GradientTask
) -> TaskOutput:
    """One gradient per ``(row, samples)`` of ``task.at``, at ``broadcast[task.stack][row]``;
    with ``task.gram`` also their Gram matrix (``fedsim.gradient_tasks.gram``).
    Entries with one row and sample count are one ``batched_gradients`` call."""
    stack = broadcast[task.stack]
    n_entries = len(task.at)
    losses = [0.0] * n_entries
    groups: dict[tuple[int, int], list[int]] = {}
    for j, (row, samples) in enumerate(task.at):
        size = len(samples)
        if worker.vmappable and 0 < size <= worker.spec.client.eval_batch_size:
            groups.setdefault((row, size), []).append(j)
        else:
            groups.setdefault((row, -1 - j), []).append(j)  # one at a time
    grads = None
    if len(groups) != 1 or next(iter(groups))[1] < 0:
        grads = torch.empty(n_entries, worker.flat.numel(), dtype=torch.float32)  # all rows set
    for (row, size), entries in groups.items():
        worker.flat.copy_(stack[row])
        if size > 0:
            samples = [np.asarray(task.at[j][1], dtype=np.int64) for j in entries]
            parts, values = batched_gradients(worker, samples, task.train_mode)
            # the parameters in layout order (no buffers: ``vmappable``), one row per entry
            rows = torch.cat([v.reshape(len(entries), -1) for v in parts.values()], 1).cpu()
            if grads is None:
                grads = rows  # one group holding every entry, in order
            else:
                grads.index_copy_(0, torch.tensor(entries), rows)
            for j, value in zip(entries, values.tolist(), strict=True):
                losses[j] = value
            continue
        (j,) = entries
        seed_torch(
            torch_seed(
                worker.spec.client.seed, round_idx, task.client, STACKED_GRADIENT_KIND, row, j
            ),
            worker.device,
        )
        grad = torch.zeros_like(worker.flat)
        losses[j] = gradient_client(
            worker.module,
            worker.data,
            np.asarray(task.at[j][1], dtype=np.int64),
            grad,
            worker.layout,
            batch_size=worker.spec.client.eval_batch_size,
            train_mode=task.train_mode,
            device=worker.device,
        )
        grads[j] = grad.to("cpu")
    return TaskOutput(
        client=task.client,
        tag=task.tag,
        gradient=grads,
        loss=float(np.mean(losses)) if losses else None,
        num_samples=sum(len(samples) for _, samples in task.at),
        losses=losses,
        gram=gram(grads) if task.gram else None,
    )


def curvature(
    worker: ClientWorker, round_idx: int, broadcast: dict[str, Any], task: CurvatureTask
) -> TaskOutput:
    """The top Hessian eigenvalue of the client's loss at the task's parameters."""
    worker.flat.copy_(broadcast["params"] if task.params is None else task.params)
    samples = task_samples(worker, round_idx, task, CURVATURE_KIND)
    seed = torch_seed(worker.spec.client.seed, round_idx, task.client, CURVATURE_KIND, task.key)
    eigenvalue = hessian_top_eigenvalue(
        worker.module,
        worker.data,
        samples,
        batch_size=worker.spec.client.eval_batch_size,
        iterations=task.iterations,
        generator=torch.Generator().manual_seed(seed),
        device=worker.device,
    )
    return TaskOutput(
        client=task.client, tag=task.tag, num_samples=len(samples), eigenvalue=eigenvalue
    )
