"""The client work itself: a lean train/evaluate loop over a LightningModule.

The module's own ``configure_optimizers``, ``training_step`` and training hooks are called
directly (docs/architecture.md, "Runtime": a reused Trainer costs ~10 ms per client, this
loop ~1 ms), so model code stays a LightningModule. The algorithm's client terms are this
loop's work, never the module's: their loss is added to what ``training_step`` returns, their
gradient corrections applied after ``backward``, so a plain LightningModule and a built-in
model train the same way under every algorithm.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsim.data.federated import FederatedData
from fedsim.runtime.lightning_steps import (
    LogCapture,
    capture_logs,
    reset_metrics,
    resolve_optimizers,
    step_schedulers,
)
from fedsim.runtime.train_step import TrainStep
from lightning_modules.base import FLModule
from lightning_modules.flat_params import ParamLayout
from lightning_modules.hooks import ClientTerms


def seed_torch(seed: int, device: torch.device) -> None:
    """``torch.manual_seed`` for this worker's device. On the CPU only the CPU generator is
    seeded: the same state, without the ~0.15 ms ``manual_seed`` spends on other backends."""
    if device.type == "cpu":
        torch.random.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def prepare_batch(
    batch: tuple[torch.Tensor, torch.Tensor], device: torch.device | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch on ``device``; on the CPU, 4-D images in channels-last order.

    Measured on this project's 2-core CPU, one thread: oneDNN's channels-last convolutions
    train FedAvgCNN ~20% faster (1 and 3 channels; neutral for ResNet-18). One fixed layout
    also makes every process compute the same numbers: a 1-channel batch's strides otherwise
    depend on how the image array was made (read from idx files, or unpickled from Ray's
    object store), and torch picks different kernels, so results drift apart.
    """
    x, y = batch
    if device is not None and device.type != "cpu":
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    if x.dim() == 4:
        x = x.contiguous()
        n, c, h, w = x.shape
        if c == 1:  # same memory order; only the (ambiguous) channel stride changes
            x = x.as_strided(x.shape, (h * w, 1, w, 1))
        else:
            x = x.contiguous(memory_format=torch.channels_last)
    return x, y


IGNORED = -100  # cross-entropy's ignore_index: a position without a target (padding)


@dataclass
class TrainResult:
    mean_loss: float
    steps: int
    finite: bool
    logged: dict[str, float] = field(default_factory=dict)  # self.log values, mean per name
    optimizer_state: dict[str, Any] | None = None  # when asked to keep it
    optimizer_steps: int = 0  # optimizer steps taken (steps: batches trained on)


@dataclass
class EvalResult:
    correct: int
    loss_sum: float
    num_samples: int
    # the sum of each target's squared loss: with loss_sum, the spread of the per-token
    # (per-sample) losses, a perplexity's noise band in fedsim compare
    loss_sq_sum: float = 0.0


def train_client(
    module: Any,
    data: FederatedData,
    train_indices: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device | None = None,
    terms: ClientTerms | None = None,
    clip_grad_norm: float | None = None,
    lr_scale: float = 1.0,
    bf16: bool = False,
    optimizer_state: dict[str, Any] | None = None,
    keep_optimizer_state: bool = False,
    optimizer_settings: dict[str, float] | None = None,
    steps: int | None = None,
    accumulation: int = 1,
    warmup_steps: int = 0,
) -> TrainResult:
    """SGD (or the module's own optimizer) over the client's samples, shuffled per epoch;
    stops at the first non-finite loss.

    The module's ``configure_optimizers`` is honoured as Lightning's Trainer honours it
    (``lightning_steps.py``: one optimizer, its schedulers stepped per step or epoch);
    ``lr_scale`` multiplies every parameter group's initial lr (a schedule on ``client.lr``).
    ``terms`` (the algorithm's client terms, ``ClientTerms``): ``objective`` replaces the
    module's ``training_step`` where it gives a loss (MOON, FedRoD), ``loss`` is added to the
    step's loss, ``correct_gradients`` runs after ``backward`` and before the module's
    ``on_before_optimizer_step``. ``clip_grad_norm``: each step's gradient is clipped to this
    L2 norm after those (where Lightning's Trainer clips). ``optimizer_state`` /
    ``keep_optimizer_state``: an algorithm that keeps a client's optimizer state between rounds.
    ``optimizer_settings``: this round's scheduled ``client.momentum`` / ``weight_decay``,
    set on every parameter group that has the setting. ``steps``: that many optimizer steps
    instead of ``epochs`` (passes reshuffled until then); ``accumulation``, ``warmup_steps``:
    ``train_step.py``.
    """
    module.train()
    optimizer, schedules = resolve_optimizers(module)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    for group in optimizer.param_groups:
        group["lr"] = group.setdefault("initial_lr", group["lr"]) * lr_scale
        for name, value in (optimizer_settings or {}).items():
            if name in group:
                group[name] = value
    step = TrainStep(module, optimizer, terms, clip_grad_norm, bf16, accumulation, warmup_steps)
    capture = LogCapture()
    capture_logs(module, capture)
    reset_metrics(module)
    total, batches = 0.0, 0
    n = len(train_indices)
    passes = range(epochs) if steps is None else itertools.count() if n else range(0)
    try:
        step.hook("on_train_start")
        for epoch in passes:
            if steps is not None and step.taken >= steps:
                break
            step.hook("on_train_epoch_start")
            order = train_indices[torch.randperm(n, generator=generator).numpy()]
            for batch_idx, start in enumerate(range(0, n, batch_size)):
                batch = prepare_batch(data.batch(order[start : start + batch_size]), device)
                if step.hook("on_train_batch_start", batch, batch_idx) == -1:
                    break  # as Lightning: -1 skips the rest of the epoch
                taken = step.taken
                value = step(batch, batch_idx, last=start + batch_size >= n)
                if value is None:
                    continue  # training_step returned None: Lightning skips the batch
                if not math.isfinite(value):
                    return TrainResult(mean_loss=value, steps=batches, finite=False)
                total += value
                batches += 1
                if schedules and step.taken > taken:
                    step_schedulers(schedules, "step", step.taken)
                if steps is not None and step.taken >= steps:
                    break
            step.hook("on_train_epoch_end")
            if schedules:
                step_schedulers(schedules, "epoch", epoch + 1)
        step.hook("on_train_end")
    finally:
        capture_logs(module, None)
    return TrainResult(
        mean_loss=total / max(batches, 1),
        steps=batches,
        finite=True,
        optimizer_steps=step.taken,
        logged=capture.means(),
        optimizer_state=optimizer.state_dict() if keep_optimizer_state else None,
    )


@torch.no_grad()
def evaluate_client(
    module: FLModule,
    data: FederatedData,
    test_indices: np.ndarray,
    *,
    batch_size: int,
    device: torch.device | None = None,
) -> EvalResult:
    """Correct predictions and summed CE loss of the module on the client's test split.

    A sample is one target: one label, or (a language model's targets (B, T)) each token
    that has one (-100, cross-entropy's ignored index, marks none), so loss and accuracy
    are per token; ``loss_sq_sum`` sums the targets' squared losses (their spread)."""
    module.eval()
    correct, loss_sum, loss_sq_sum, targets = 0, 0.0, 0.0, 0
    for start in range(0, len(test_indices), batch_size):
        x, y = prepare_batch(data.batch(test_indices[start : start + batch_size]), device)
        logits = module(x)
        correct += int((logits.argmax(1) == y).sum())
        losses = torch.nn.functional.cross_entropy(logits, y, reduction="none")  # 0: ignored
        loss_sum += float(losses.sum())
        loss_sq_sum += float(losses.double().square().sum())
        targets += len(y) if y.dim() == 1 else int((y != IGNORED).sum())
    return EvalResult(correct, loss_sum, targets, loss_sq_sum)


def gradient_client(
    module: FLModule,
    data: FederatedData,
    indices: np.ndarray,
    grad_flat: torch.Tensor,
    layout: ParamLayout,
    *,
    batch_size: int,
    train_mode: bool = True,
    device: torch.device | None = None,
) -> float:
    """Gradient of the mean CE loss over ``indices`` written into ``grad_flat``; returns the loss.

    Plain cross-entropy (no client terms), accumulated over chunks of ``batch_size`` so any
    number of samples fits in memory. Entries of float buffers (no gradient) stay zero.
    """
    module.train(train_mode)
    params = dict(module.named_parameters())
    for p in params.values():
        p.grad = None
    n, loss_sum = len(indices), 0.0
    for start in range(0, n, batch_size):
        x, y = prepare_batch(data.batch(indices[start : start + batch_size]), device)
        loss = torch.nn.functional.cross_entropy(module(x), y, reduction="sum") / max(n, 1)
        loss.backward()
        loss_sum += float(loss.detach())
    grad_flat.zero_()
    for name, p in params.items():
        if p.grad is not None:
            layout.view(grad_flat, name).copy_(p.grad)
        p.grad = None
    return loss_sum


def all_finite(values: torch.Tensor) -> bool:
    """Whether every entry is finite. Any inf or nan makes a sum inf or nan, so a finite sum
    proves it in one cheap pass (no mask allocated, ~10x faster than ``isfinite().all()``);
    only a non-finite sum, which may be an overflow of finite values, is checked entry-wise."""
    values = values.detach()
    return math.isfinite(float(values.sum())) or bool(torch.isfinite(values).all())


@contextlib.contextmanager
def frozen_parameters(module: Any, names: list[str] | None) -> Iterator[None]:
    """Inside the block ``names`` get no gradient (the optimizer leaves them as they are)."""
    frozen = set(names or ())
    held = [p for n, p in module.named_parameters() if n in frozen and p.requires_grad]
    for p in held:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in held:
            p.requires_grad_(True)


def keep_frozen(
    trained: torch.Tensor, start: torch.Tensor, layout: ParamLayout, names: list[str]
) -> None:
    """Put the frozen entries (and their float buffers: BatchNorm statistics) of ``start``
    back into ``trained``, in place: a copy per parameter's span (a boolean mask over the
    whole vector cost ~6.6 ms a call on the 0.58 M-parameter CNN)."""
    start = start.detach().to("cpu", torch.float32)
    for name in set(names) & set(layout.by_name):
        span = layout.slice_of(name)
        trained[span] = start[span]
