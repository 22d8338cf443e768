"""The client work itself: a lean train/evaluate loop over a LightningModule.

The module's own ``configure_optimizers``, ``training_step`` and
``on_before_optimizer_step`` are called directly (DESIGN.md: a reused Trainer costs
~10 ms per client, this loop ~1 ms), so model code stays a LightningModule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from fedsim.data.federated import FederatedData
from lightning_modules.base import FLModule


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
) -> TrainResult:
    """SGD over the client's samples, shuffled per epoch; stops at the first non-finite loss."""
    module.train()
    optimizer = module.configure_optimizers()
    total, steps = 0.0, 0
    n = len(train_indices)
    for _ in range(epochs):
        order = train_indices[torch.randperm(n, generator=generator).numpy()]
        for start in range(0, n, batch_size):
            batch = data.batch(order[start : start + batch_size])
            loss = module.training_step(batch, steps)
            value = float(loss.detach())
            if not math.isfinite(value):
                return TrainResult(mean_loss=value, steps=steps, finite=False)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            module.on_before_optimizer_step(optimizer)
            optimizer.step()
            total += value
            steps += 1
    return TrainResult(mean_loss=total / max(steps, 1), steps=steps, finite=True)


@torch.no_grad()
def evaluate_client(
    module: FLModule, data: FederatedData, test_indices: np.ndarray, *, batch_size: int
) -> EvalResult:
    """Correct predictions and summed CE loss of the module on the client's test split."""
    module.eval()
    correct, loss_sum = 0, 0.0
    for start in range(0, len(test_indices), batch_size):
        x, y = data.batch(test_indices[start : start + batch_size])
        logits = module(x)
        correct += int((logits.argmax(1) == y).sum())
        loss_sum += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
    return EvalResult(correct=correct, loss_sum=loss_sum, num_samples=len(test_indices))
