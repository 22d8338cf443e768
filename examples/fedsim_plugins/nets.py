"""A user model: any subclass of ``lightning_modules.base.FLModule`` with ``block_names``."""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.base import FLModule


class TinyMLP(FLModule):
    """Flatten -> FC(hidden) -> ReLU -> FC(K): two named blocks, ``body`` and ``head``.

    fedsim builds it with the dataset's shape and the client optimizer settings, as it does
    its own models; FedPer, cwFedAvg... find the output layer through ``block_names``.
    """

    block_names = ("body", "head")

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        hidden: int = 64,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        inputs = in_channels * image_size * image_size
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(inputs, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))
