"""MLP: flattened images -> fully connected ReLU layers -> logits (PyTorch's default init).

The network of SP-CACW's relabel check (784-200-200-10 on 28x28 digits); hidden sizes are
``model.hidden``. Each layer is its own block (``fc1`` .. ``fcN``, the head ``fc``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from lightning_modules.base import FLModule

DEFAULT_HIDDEN = (200, 200)


class MLP(FLModule):
    """in_channels * image_size^2 -> hidden[0] -> ... -> num_classes, ReLU between layers."""

    block_names = ("fc1", "fc2", "fc")  # per instance: one block per hidden layer, then fc

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        hidden: Sequence[int] = DEFAULT_HIDDEN,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        sizes = [in_channels * image_size * image_size, *(int(h) for h in hidden)]
        self.block_names = (*(f"fc{i + 1}" for i in range(len(hidden))), "fc")
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            setattr(self, f"fc{i + 1}", nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU()))
        self.fc = nn.Linear(sizes[-1], num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last hidden layer's output, which the output layer reads (MOON, FedRoD)."""
        x = torch.flatten(x, 1)
        for name in self.block_names[:-1]:
            x = getattr(self, name)(x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
