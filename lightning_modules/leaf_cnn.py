"""LEAF's reference CNNs (TalwalkarLab/leaf, ``models/femnist/cnn.py`` and
``models/celeba/cnn.py``), layer for layer in PyTorch.

LEAF builds them in TensorFlow 1; what carries over: 'same' convolutions, 2x2 max-pooling
with stride 2 (FEMNIST: floor, CelebA: 'same', i.e. ceil), and TensorFlow's initialisation
(Glorot-uniform weights, zero biases). BatchNorm uses TensorFlow's epsilon (1e-3); LEAF
normalises with batch statistics even when it evaluates (``training=True``) and never reads
the moving averages, so their momentum is PyTorch's default here and evaluation uses them,
as any PyTorch BatchNorm model does. The flatten order is PyTorch's (C, H, W) instead of
TensorFlow's (H, W, C): the same set of functions, the dense weights permuted.
"""

from __future__ import annotations

import torch
from torch import nn

from lightning_modules.base import FLModule


def _tf_init(module: nn.Module) -> None:
    """TensorFlow 1's defaults for conv and dense layers: Glorot-uniform kernel, zero bias."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)


class FemnistCNN(FLModule):
    """LEAF's FEMNIST CNN: Conv5-32 'same' -> ReLU -> pool -> Conv5-64 'same' -> ReLU -> pool
    -> FC2048 -> ReLU -> FC(K). 6,603,710 parameters on 28x28 grey images, 62 classes."""

    block_names = ("conv1", "conv2", "fc1", "fc")

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 62,
        image_size: int = 28,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        side = image_size // 2 // 2  # 'same' convolutions keep the side; each pool floors it
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, 32, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2),
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(32, 64, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2),
        )
        self.fc1 = nn.Sequential(nn.Linear(64 * side * side, 2048), nn.ReLU(inplace=True))
        self.fc = nn.Linear(2048, num_classes)
        _tf_init(self)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The 2048-d representation the output layer reads (MOON, FedRoD)."""
        return self.fc1(torch.flatten(self.conv2(self.conv1(x)), 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class CelebaCNN(FLModule):
    """LEAF's CelebA CNN: 4 x [Conv3-32 'same' -> BatchNorm -> 2x2 max-pool 'same' -> ReLU]
    -> FC(K). On 84x84 colour images the side goes 84 -> 42 -> 21 -> 11 -> 6: 31,202
    parameters for 2 classes (BatchNorm's scale and shift included)."""

    block_names = ("conv1", "conv2", "conv3", "conv4", "fc")

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 2,
        image_size: int = 84,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        self.conv1 = _celeba_block(in_channels)
        self.conv2 = _celeba_block(32)
        self.conv3 = _celeba_block(32)
        self.conv4 = _celeba_block(32)
        side = image_size
        for _ in range(4):
            side = (side + 1) // 2  # TensorFlow's 'same' pooling: ceil(side / 2)
        self.fc = nn.Linear(32 * side * side, num_classes)
        _tf_init(self)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The flattened output of the last block, which the output layer reads."""
        x = self.conv4(self.conv3(self.conv2(self.conv1(x))))
        return torch.flatten(x, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def _celeba_block(in_channels: int) -> nn.Sequential:
    """Conv3-32 'same' -> BatchNorm (TensorFlow's eps) -> max-pool 2x2/2 'same' -> ReLU.

    For a 2x2 window with stride 2, TensorFlow's 'same' pads one row/column at the end only
    when the side is odd, which the padding ignores: ``ceil_mode=True`` is the same pooling."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, kernel_size=3, padding=1),
        nn.BatchNorm2d(32, eps=1e-3),
        nn.MaxPool2d(2, stride=2, ceil_mode=True),
        nn.ReLU(inplace=True),
    )
