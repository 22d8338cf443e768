"""Attacks, so the defences are tested rather than assumed (``attack.*``).

A seeded share of the clients attacks from ``attack.start_round`` on: ``label_flip`` trains
on labels y -> K-1-y; the others corrupt the upload's delta (upload minus received model):
``sign_flip`` sends -factor * delta, ``scale`` factor * delta, ``gaussian`` replaces it by
Gaussian noise whose norm is about factor times the delta's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsim.config import AttackConfig
from fedsim.streams import ATTACKERS_TAG, torch_seed


def attackers(settings: AttackConfig, num_clients: int, seed: int) -> list[int]:
    """The attacking clients: round(fraction * clients) of them, drawn from the seed."""
    if settings.kind == "none" or num_clients == 0:
        return []
    count = int(round(settings.fraction * num_clients))
    rng = np.random.default_rng([seed, ATTACKERS_TAG])
    return sorted(rng.choice(num_clients, size=count, replace=False).tolist())


def corrupt_delta(kind: str, delta: torch.Tensor, factor: float, seed: list[int]) -> torch.Tensor:
    """The attacker's upload delta for a model-poisoning ``kind`` (label_flip: unchanged)."""
    if kind == "sign_flip":
        return -factor * delta
    if kind == "scale":
        return factor * delta
    if kind == "gaussian":
        generator = torch.Generator().manual_seed(torch_seed(*seed))
        noise = torch.randn(delta.numel(), generator=generator, dtype=torch.float32)
        std = factor * float(delta.norm()) / max(delta.numel(), 1) ** 0.5
        return (noise * std).to(delta.dtype)
    return delta


class LabelFlipped:
    """A view of the federated data whose labels are flipped: y -> K-1-y (label_flip)."""

    def __init__(self, data: Any, num_classes: int):
        self.data, self.num_classes = data, num_classes

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.data.batch(indices)
        return x, (self.num_classes - 1) - y

    def __getattr__(self, name: str) -> Any:
        return getattr(self.data, name)
