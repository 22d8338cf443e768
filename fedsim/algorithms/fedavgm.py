"""FedAvgM (Hsu et al., 2019): FedAvg with server momentum.

The pseudo-gradient d = sum_k w_k (theta - theta_k) = theta - sum_k w_k theta_k is one step
of server SGD with momentum (torch's rule): v <- beta v + d; theta <- theta - lr v.
Defaults lr 1.0, beta 0.9 (ALGORITHMS.md). w_k from ``algorithm.weighting`` (n_k / sum n).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsim.algorithms.base import ServerState, WeightedSum
from fedsim.algorithms.registry import register
from fedsim.algorithms.weighting import WeightedFedAvg, WeightingParams
from fedsim.errors import ConfigError


@dataclass
class FedAvgMParams(WeightingParams):
    """``algorithm.*`` keys of FedAvgM: the server optimizer and the weighting keys."""

    server_lr: float = 1.0
    server_momentum: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.server_lr > 0:
            raise ConfigError("algorithm.server_lr", self.server_lr, "must be > 0")
        if not 0 <= self.server_momentum < 1:
            raise ConfigError(
                "algorithm.server_momentum", self.server_momentum, "must be in [0, 1)"
            )


@register
class FedAvgM(WeightedFedAvg):
    """Clients as FedAvg; the server applies the averaged update through momentum SGD."""

    name = "fedavgm"
    Params = FedAvgMParams

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        return {"params": initial_params.clone(), "momentum": torch.zeros_like(initial_params)}

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        round_idx: int,
    ) -> ServerState:
        mean = self.weighting.mean(sums, "params")
        if mean is None:
            return state
        pseudo_gradient = state["params"] - mean
        momentum = self.params.server_momentum * state["momentum"] + pseudo_gradient
        params = state["params"] - self.params.server_lr * momentum
        return {**state, "params": params, "momentum": momentum}
