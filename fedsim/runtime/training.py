"""The client work itself: a lean train/evaluate loop over a LightningModule.

The module's own ``configure_optimizers``, ``training_step`` and
``on_before_optimizer_step`` are called directly (docs/architecture.md, "Runtime": a reused
Trainer costs ~10 ms per client, this loop ~1 ms), so model code stays a LightningModule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from fedsim.data.federated import FederatedData
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


@dataclass
class TrainResult:
    mean_loss: float
    steps: int
    finite: bool


@dataclass
class EvalResult:
    correct: int
    loss_sum: float
    num_samples: int


def train_client(
    module: FLModule,
    data: FederatedData,
    train_indices: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    generator: torch.Generator,
    device: torch.device | None = None,
    terms: ClientTerms | None = None,
    clip_grad_norm: float | None = None,
) -> TrainResult:
    """SGD over the client's samples, shuffled per epoch; stops at the first non-finite loss.

    ``terms`` (the algorithm's client terms) go to the module's ``training_step`` and
    ``on_before_optimizer_step`` on every step; None trains on plain cross-entropy.
    ``clip_grad_norm``: each step's gradient is clipped to this L2 norm after those hooks
    (where Lightning's Trainer clips), with ``torch.nn.utils.clip_grad_norm_``.
    """
    module.train()
    optimizer = module.configure_optimizers()
    total, steps = 0.0, 0
    n = len(train_indices)
    for _ in range(epochs):
        order = train_indices[torch.randperm(n, generator=generator).numpy()]
        for start in range(0, n, batch_size):
            batch = prepare_batch(data.batch(order[start : start + batch_size]), device)
            loss = module.training_step(batch, steps, terms=terms)
            value = float(loss.detach())
            if not math.isfinite(value):
                return TrainResult(mean_loss=value, steps=steps, finite=False)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            module.on_before_optimizer_step(optimizer, terms=terms)
            if clip_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(module.parameters(), clip_grad_norm)
            optimizer.step()
            total += value
            steps += 1
    return TrainResult(mean_loss=total / max(steps, 1), steps=steps, finite=True)


@torch.no_grad()
def evaluate_client(
    module: FLModule,
    data: FederatedData,
    test_indices: np.ndarray,
    *,
    batch_size: int,
    device: torch.device | None = None,
) -> EvalResult:
    """Correct predictions and summed CE loss of the module on the client's test split."""
    module.eval()
    correct, loss_sum = 0, 0.0
    for start in range(0, len(test_indices), batch_size):
        x, y = prepare_batch(data.batch(test_indices[start : start + batch_size]), device)
        logits = module(x)
        correct += int((logits.argmax(1) == y).sum())
        loss_sum += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
    return EvalResult(correct=correct, loss_sum=loss_sum, num_samples=len(test_indices))


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
