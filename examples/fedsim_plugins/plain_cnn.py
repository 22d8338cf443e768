"""PFLlib's FedAvgCNN written as a plain LightningModule: no fedsim base class, no fedsim import.

The same layers, names and construction order as fedsim's built-in ``fedavg_cnn`` (and
``fedavg_cnn_bn``), its own SGD in ``configure_optimizers`` and cross-entropy in
``training_step``: under every algorithm it trains exactly as the built-in does (the
contract test, ``tests/test_own_module_contract.py``). ``PlainCNNWithFeatures`` adds the one
method MOON and FedRoD need, ``features(x)``: what the output layer reads.

    fedsim run configs/quickstart.yaml model.name=fedsim_plugins.plain_cnn:PlainCNN \\
        client.lr=null model.args.lr=0.05
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn


def _side(image_size: int) -> int:
    return ((image_size - 4) // 2 - 4) // 2


class PlainCNN(pl.LightningModule):
    """Conv5-32 -> pool -> Conv5-64 -> pool -> FC512 -> FC(K), trained with its own SGD."""

    def __init__(
        self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28, lr: float = 0.005
    ):
        super().__init__()
        self.lr = lr
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(32, 64, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.fc1 = nn.Sequential(nn.Linear(64 * _side(image_size) ** 2, 512), nn.ReLU(inplace=True))
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.fc1(torch.flatten(self.conv2(self.conv1(x)), 1)))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class PlainCNNWithFeatures(PlainCNN):
    """``PlainCNN`` plus ``features(x)``, the input of its output layer (MOON, FedRoD)."""

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(torch.flatten(self.conv2(self.conv1(x)), 1))


class PlainCNNBN(pl.LightningModule):
    """FedAvgCNN with BatchNorm after each convolution (FedBN's model), written plainly."""

    def __init__(
        self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28, lr: float = 0.005
    ):
        super().__init__()
        self.lr = lr
        self.conv1 = nn.Conv2d(in_channels, 32, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * _side(image_size) ** 2, 512)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(F.relu(self.fc1(torch.flatten(x, 1))))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)
