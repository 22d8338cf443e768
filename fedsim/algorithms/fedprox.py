"""FedProx (Li et al., MLSys 2020; PFLlib clientprox): FedAvg plus a proximal client term.

Each local step follows grad + mu (w - w_global), i.e. the loss gains (mu/2) ||w - w_global||^2
over the parameters. ``algorithm.mu`` has no default (0.01 is common; 0 is FedAvg). The
server is FedAvg's, with ``algorithm.weighting`` (FedVG + FedProx: ``weighting=fedvg``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState
from fedsim.algorithms.registry import register
from fedsim.algorithms.weighting import NamedViews, WeightedFedAvg, WeightingParams
from fedsim.errors import ConfigError
from lightning_modules.flat_params import ParamLayout


@dataclass
class FedProxParams(WeightingParams):
    """``algorithm.*`` keys of FedProx: ``mu`` (required) and the weighting keys."""

    mu: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu is None:
            raise ConfigError(
                "algorithm.mu", None, "required for fedprox: set algorithm.mu (0.01 is common)"
            )
        if not self.mu >= 0:
            raise ConfigError("algorithm.mu", self.mu, "must be >= 0 (0: plain FedAvg)")


class ProximalTerm:
    """Client term (mu/2) ||w - w_global||^2; its gradient is mu (w - w_global)."""

    def __init__(self, global_params: torch.Tensor, layout: ParamLayout, mu: float):
        self.anchor, self.mu = NamedViews(global_params, layout), mu

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        if not params:
            return None
        anchor = self.anchor.on(next(iter(params.values())).device)
        total = sum((p - anchor[name]).pow(2).sum() for name, p in params.items())
        return 0.5 * self.mu * total

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        return None


@register
class FedProx(WeightedFedAvg):
    """FedAvg with the proximal term on every client."""

    name = "fedprox"
    Params = FedProxParams

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        plan = super().client_start(broadcast, payload, state, client)
        plan.terms = ProximalTerm(broadcast["params"], self.federation.layout, self.params.mu)
        return plan
