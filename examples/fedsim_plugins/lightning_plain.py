"""A LightningModule written as Lightning users write it: no fedsim base class.

fedsim trains it as Lightning would: ``configure_optimizers`` returns Adam with a StepLR
scheduler stepped every epoch; ``training_step`` logs its loss and learning rate with
``self.log`` (they land in clients.csv, metrics.jsonl and W&B as ``train/loss`` and
``train/lr``); the blocks FedPer or cwFedAvg need are its top-level children (``features``,
then ``classifier``, the output layer).

    fedsim run configs/quickstart.yaml model.name=fedsim_plugins.lightning_plain:PlainNet
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn


class PlainNet(pl.LightningModule):
    def __init__(self, in_channels: int = 1, num_classes: int = 10, image_size: int = 28):
        super().__init__()
        self.features = nn.Sequential(
            nn.Flatten(), nn.Linear(in_channels * image_size * image_size, 64), nn.ReLU()
        )
        self.classifier = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        self.log("lr", self._optimizer.param_groups[0]["lr"])
        return loss

    def configure_optimizers(self):
        self._optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.StepLR(self._optimizer, step_size=1, gamma=0.5)
        return {
            "optimizer": self._optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "epoch", "frequency": 1},
        }
