"""A user algorithm: any subclass of ``fedsim.algorithms.base.Algorithm``.

FedMedian (Yin et al., ICML 2018): the server takes the coordinate-wise median of the
cohort's models instead of their weighted mean, which resists a few corrupted clients.
A median cannot be reduced on the workers, so each client uploads its model individually.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsim.algorithms.base import (
    Algorithm,
    AlgorithmParams,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    RoundContext,
    ServerState,
    WeightedSum,
)


@dataclass
class FedMedianParams(AlgorithmParams):
    """``algorithm.<key>`` options, validated like the built-ins' (unknown keys are errors)."""

    trim: int = 0  # drop this many of the smallest and largest values first (0: plain median)


class FedMedian(Algorithm):
    """Every client trains the global model; the server keeps the coordinate-wise median."""

    Params = FedMedianParams

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate(individual=trained)

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        if not individual:
            return state  # nobody finished this round: keep the model
        models = torch.stack([individual[c] for c in sorted(individual)])
        trim = min(self.params.trim, (len(models) - 1) // 2)
        if trim:
            models = models.sort(dim=0).values[trim : len(models) - trim]
        return {**state, "params": models.median(dim=0).values}
