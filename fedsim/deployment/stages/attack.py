"""The attack stage (``attack.*``): a seeded share of the clients attacks.

Client side: ``label_flip`` trains on flipped labels (a ``TrainingView``: the worker applies
it as it applies any stage's); the other kinds corrupt the upload's delta. Server side: the
round's ``attackers``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsim.config import AttackConfig
from fedsim.deployment.attacks import LabelFlipped, attackers, corrupt_delta
from fedsim.deployment.stages.base import (
    ClientStep,
    ServerAggregation,
    StepContext,
    TrainingView,
    UploadStage,
)
from fedsim.streams import ATTACK_NOISE_TAG


@dataclass(frozen=True)
class CorruptDelta(ClientStep):
    kind: str
    factor: float

    def apply(self, delta: torch.Tensor, context: StepContext) -> torch.Tensor:
        seed = [context.seed, context.round, context.client, ATTACK_NOISE_TAG]
        return corrupt_delta(self.kind, delta, self.factor, seed)


@dataclass(frozen=True)
class FlippedLabels(TrainingView):
    """label_flip: the client trains on labels K-1-y, and its statistics are of those (so
    FedRoD's balanced softmax gives a flipped label of an absent class no -inf)."""

    num_classes: int

    def data(self, data: Any) -> Any:
        return LabelFlipped(data, self.num_classes)

    def class_counts(self, counts: np.ndarray) -> np.ndarray:
        return counts[::-1].copy()


class AttackStage(UploadStage):
    def __init__(self, config: AttackConfig, num_clients: int, seed: int, num_classes: int):
        self.config, self.num_classes = config, num_classes
        self.attackers = set(attackers(config, num_clients, seed))

    def attacking(self, client: int, round_idx: int) -> bool:
        return client in self.attackers and round_idx >= self.config.start_round

    def training_view(self, client: int, round_idx: int) -> TrainingView | None:
        if self.config.kind == "label_flip" and self.attacking(client, round_idx):
            return FlippedLabels(self.num_classes)
        return None

    def client_step(self, client: int, round_idx: int) -> ClientStep | None:
        if self.config.kind == "label_flip" or not self.attacking(client, round_idx):
            return None
        return CorruptDelta(self.config.kind, self.config.factor)

    def server(self, aggregation: ServerAggregation) -> None:
        aggregation.metrics["attackers"] = [
            c.client for c in aggregation.trained if self.attacking(c.client, aggregation.round)
        ]

    def partition_info(self, partition: dict[str, Any]) -> dict[str, Any]:
        """partition.json with the attackers marked."""
        out = dict(partition)
        out["attacked_clients"] = sorted(self.attackers)
        clients = partition.get("clients", [])
        out["clients"] = [{**c, "attacked": c.get("client") in self.attackers} for c in clients]
        return out
