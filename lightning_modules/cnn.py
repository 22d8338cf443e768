"""FedAvgCNN with PFLlib's exact shapes (gray 28x28: dim 1024; colour 32x32: dim 1600), and
its BatchNorm variant (FedBN's model: BatchNorm after each convolution)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lightning_modules.base import FLModule


class FedAvgCNN(FLModule):
    """Conv5-32 -> pool -> Conv5-64 -> pool -> FC512 -> FC(K), as PFLlib's ``FedAvgCNN``."""

    block_names = ("conv1", "conv2", "fc1", "fc")

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        side = ((image_size - 4) // 2 - 4) // 2
        dim = 64 * side * side
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(32, 64, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.fc1 = nn.Sequential(nn.Linear(dim, 512), nn.ReLU(inplace=True))
        self.fc = nn.Linear(512, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The 512-d representation the output layer reads (MOON, FedRoD)."""
        return self.fc1(torch.flatten(self.conv2(self.conv1(x)), 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class FedAvgCNNBN(FLModule):
    """FedAvgCNN with BatchNorm after each convolution: Conv5-32 -> BN -> ReLU -> pool ->
    Conv5-64 -> BN -> ReLU -> pool -> FC512 -> ReLU -> FC(K). Layer names conv1, bn1, conv2,
    bn2, fc1, fc: the FedAvgCNNBN the PFLlib reference runs for FedBN used (PFLlib's own
    FedBN identifies BatchNorm parameters by "bn" in their names)."""

    block_names = ("conv1", "bn1", "conv2", "bn2", "fc1", "fc")

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        side = ((image_size - 4) // 2 - 4) // 2
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * side * side, 512)
        self.fc = nn.Linear(512, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The 512-d representation the output layer reads."""
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return F.relu(self.fc1(torch.flatten(x, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
