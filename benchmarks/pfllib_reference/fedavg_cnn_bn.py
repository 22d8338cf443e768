"""FedAvgCNN with BatchNorm after each convolution: the model of the FedBN rows on the PFLlib
side, the same layers as fedsim's built-in ``fedavg_cnn_bn``.

conv1 Conv2d(1, 32, 5) -> bn1 -> ReLU -> MaxPool 2 -> conv2 Conv2d(32, 64, 5) -> bn2 -> ReLU
-> MaxPool 2 -> flatten -> fc1 Linear(1024, 512) -> ReLU -> fc Linear(512, 10). Only bn1 and
bn2 have "bn" in their parameter names, which is how PFLlib's FedBN client tells the layers it
keeps local; the last layer is ``fc`` as PFLlib's base/head split expects.
"""

from __future__ import annotations

import torch
from torch import nn


class FedAvgCNNBN(nn.Module):
    def __init__(self, in_features: int = 1, num_classes: int = 10, dim: int = 1024) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_features, 32, kernel_size=5, padding=0, stride=1, bias=True)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5, padding=0, stride=1, bias=True)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(dim, 512)
        self.fc = nn.Linear(512, num_classes)
        self.act = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(kernel_size=(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.pool(self.act(self.bn1(self.conv1(x))))
        out = self.pool(self.act(self.bn2(self.conv2(out))))
        out = self.act(self.fc1(torch.flatten(out, 1)))
        return self.fc(out)
