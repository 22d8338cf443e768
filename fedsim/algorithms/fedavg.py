"""FedAvg: w = sum_i (n_i / sum n) w_i over the cohort (McMahan et al.; PFLlib serveravg)."""

from __future__ import annotations

from typing import Any

import torch

from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register


@register
class FedAvg(Algorithm):
    """Every client trains the global model; the server takes the sample-weighted mean."""

    name = "fedavg"

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate(sums={"params": (float(client.num_train), trained)})

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        round_idx: int,
    ) -> ServerState:
        total = sums.get("params")
        if total is None or total.weight <= 0:
            return state  # nobody finished this round: keep the model
        return {**state, "params": total.mean()}
