"""FedProx (Li et al., MLSys 2020; PFLlib clientprox): FedAvg plus a proximal client term.

Each local step follows grad + mu (w - w_global), i.e. the loss gains (mu/2) ||w - w_global||^2
over the parameters (``pull.py``, as a loss). ``algorithm.mu`` has no default (0.01 is
common; 0 is FedAvg). The server is FedAvg's, with ``algorithm.weighting`` (FedVG + FedProx:
``weighting=fedvg``) and FedAvg's server optimizer keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState
from fedsim.algorithms.fedavg import FedAvg, FedAvgParams
from fedsim.algorithms.pull import Pull
from fedsim.algorithms.registry import register
from fedsim.checks import checked
from fedsim.errors import ConfigError


@dataclass
class FedProxParams(FedAvgParams):
    """``algorithm.*`` keys of FedProx: ``mu`` (required) and FedAvg's keys."""

    mu: float | None = checked(  # proximal strength: loss += (mu/2) ||w - w_global||^2; required
        None, lambda v: v is None or v >= 0, "must be >= 0 (0: plain FedAvg)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu is None:
            raise ConfigError(
                "algorithm.mu", None, "required for fedprox: set algorithm.mu (0.01 is common)"
            )


@register
class FedProx(FedAvg):
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
        plan.terms = Pull(broadcast["params"], self.federation.layout, self.params.mu, "loss")
        return plan
