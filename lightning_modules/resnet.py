"""ResNet-18 for 32x32 images: torchvision's, with a 3x3 stride-1 stem and no max-pool.

The usual CIFAR adaptation (as in FedVG's FL-bench and most CIFAR ResNets): the ImageNet stem
(7x7 stride-2 conv + max-pool) would shrink a 32x32 image to 8x8 before the first block.
Each BasicBlock is its own named block, so FedPer's ``personal_layers=K`` counts basic blocks
from the top as the seed does (K=1: the output layer; K=3: the last two basic blocks + fc).
"""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import resnet18

from lightning_modules.base import FLModule

STAGES = ("layer1", "layer2", "layer3", "layer4")


class ResNet18(FLModule):
    """torchvision ``resnet18`` re-wired as named blocks: stem, 8 basic blocks, fc."""

    block_names = (
        "stem",
        *(f"{stage}_{i}" for stage in STAGES for i in range(2)),
        "fc",
    )

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        net = resnet18(weights=None, num_classes=num_classes)
        conv = nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")  # as torchvision
        self.stem = nn.Sequential(conv, net.bn1, net.relu)  # no max-pool
        for stage in STAGES:
            for i, block in enumerate(getattr(net, stage)):
                setattr(self, f"{stage}_{i}", block)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = net.fc
        self.image_size = image_size

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled 512-d representation the output layer reads."""
        x = self.stem(x)
        for name in self.block_names[1:-1]:
            x = getattr(self, name)(x)
        return torch.flatten(self.pool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
