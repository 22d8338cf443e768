"""FedAvgCNN with PFLlib's exact shapes (gray 28x28: dim 1024; colour 32x32: dim 1600), and
its BatchNorm variant (FedBN's model: BatchNorm after each convolution).

Both take their widths as options, PFLlib's by default: ``model.args.channels`` (the two
convolutions' filters, ``[32, 64]``) and ``model.hidden`` (the one hidden fully connected
layer, ``[512]``). A narrower net, e.g. ``[16, 32]`` and ``[128]`` (80 k parameters instead
of 582 k), trains ~2.7x faster on a CPU: quick experiments, tests."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fedsim.errors import ConfigError
from lightning_modules.base import FLModule

CHANNELS = (32, 64)  # PFLlib's filters per convolution
HIDDEN = (512,)  # PFLlib's hidden fully connected layer


def checked_widths(channels: Sequence[int], hidden: Sequence[int]) -> tuple[int, int, int]:
    """(conv1 filters, conv2 filters, hidden units); ConfigError naming the key otherwise."""
    for key, value, n, allowed in (
        ("model.args.channels", channels, 2,
         "two integers >= 1: the filters of the two convolutions (default [32, 64])"),
        ("model.hidden", hidden, 1,
         "one integer >= 1 in a list: the hidden fully connected layer's size (default [512])"),
    ):  # fmt: skip
        if not (
            isinstance(value, Sequence)
            and len(value) == n
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
        ):
            shown = list(value) if isinstance(value, (list, tuple)) else value
            raise ConfigError(key, shown, allowed)
    return channels[0], channels[1], hidden[0]


class FedAvgCNN(FLModule):
    """Conv5-32 -> pool -> Conv5-64 -> pool -> FC512 -> FC(K), as PFLlib's ``FedAvgCNN``
    (the widths by default; ``channels`` and ``hidden`` set them)."""

    block_names = ("conv1", "conv2", "fc1", "fc")

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        channels: Sequence[int] = CHANNELS,
        hidden: Sequence[int] = HIDDEN,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        c1, c2, units = checked_widths(channels, hidden)
        side = ((image_size - 4) // 2 - 4) // 2
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, c1, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(c1, c2, kernel_size=5), nn.ReLU(inplace=True), nn.MaxPool2d(2)
        )
        self.fc1 = nn.Sequential(nn.Linear(c2 * side * side, units), nn.ReLU(inplace=True))
        self.fc = nn.Linear(units, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The representation the output layer reads (512-d by default; MOON, FedRoD)."""
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
        channels: Sequence[int] = CHANNELS,
        hidden: Sequence[int] = HIDDEN,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        c1, c2, units = checked_widths(channels, hidden)
        side = ((image_size - 4) // 2 - 4) // 2
        self.conv1 = nn.Conv2d(in_channels, c1, kernel_size=5)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, kernel_size=5)
        self.bn2 = nn.BatchNorm2d(c2)
        self.fc1 = nn.Linear(c2 * side * side, units)
        self.fc = nn.Linear(units, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The representation the output layer reads (512-d by default)."""
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return F.relu(self.fc1(torch.flatten(x, 1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
