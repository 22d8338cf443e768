"""LightningModules written with common Lightning idioms, as fedsim runs them.

- ``MetricNet``: a torchmetrics ``Metric`` logged with ``self.log`` (computed over each
  client's training and reset between clients), tensors and floats with ``on_step`` /
  ``on_epoch`` / ``reduce_fx``, ``self.log_dict``, and ``on_train_epoch_start`` / ``_end``;
- ``LazyNet``: ``nn.LazyLinear`` layers, materialized by one sample batch when the run is
  built;
- ``Fixed14``: a model for 14x14 images, which does not fit 28x28 data (refused in one line).
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy


class MetricNet(pl.LightningModule):
    """A small MLP that logs the way Lightning users log."""

    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28):
        super().__init__()
        self.body = nn.Sequential(
            nn.Flatten(), nn.Linear(in_channels * image_size**2, 32), nn.ReLU()
        )
        self.head = nn.Linear(32, num_classes)
        self.train_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.train_acc(logits, y)
        self.log("acc", self.train_acc, on_step=True, on_epoch=True)
        self.log("correct", (logits.argmax(1) == y).sum().float(), reduce_fx="sum")
        self.log("seen", float(len(y)), reduce_fx=torch.sum)
        self.log_dict({"loss": loss, "worst": loss.detach()}, on_step=True, on_epoch=False)
        return {"loss": loss}

    def on_train_epoch_start(self) -> None:
        self.epoch_started = True

    def on_train_epoch_end(self) -> None:
        self.log("epochs", float(self.epoch_started), reduce_fx="sum")
        self.epoch_started = False

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class _BodyHead(pl.LightningModule):
    """``head(body(x))``, cross-entropy, SGD at 0.05: what the two modules below share."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class LazyNet(_BodyHead):
    """Lazy layers: their input sizes come from the first batch."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.LazyLinear(32), nn.ReLU())
        self.head = nn.LazyLinear(num_classes)


class Fixed14(_BodyHead):
    """Built for 14x14 grey images whatever the data says."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(14 * 14, 32), nn.ReLU())
        self.head = nn.Linear(32, num_classes)


class WrongFeatures(Fixed14):
    """``features`` that is not what the output layer reads (MOON would train on nonsense)."""

    def __init__(self, num_classes: int = 10):
        super().__init__(num_classes)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU())

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, 1)
