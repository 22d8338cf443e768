"""FedProx (Li et al., MLSys 2020; PFLlib clientprox): FedAvg plus a proximal client term.

Each local step follows grad + mu (w - w_global), i.e. the loss gains (mu/2) ||w - w_global||^2
over the parameters (``pull.py``, as a loss). ``algorithm.mu`` has no default (0.01 is
common; 0 is FedAvg). The server is FedAvg's, with ``algorithm.weighting`` (FedVG + FedProx:
``weighting=fedvg``) and FedAvg's server optimizer keys.
"""

from __future__ import annotations

from typing import Any

from fedsim.algorithm_params.fedprox import FedProxParams
from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState, NewcomerRule
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.pull import Pull
from fedsim.algorithms.registry import register


@register
class FedProx(FedAvg):
    """FedAvg with the proximal term on every client."""

    name = "fedprox"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Li et al. 2020: "
        "FedAvg's one global model (the proximal term acts only in training)",
    )
    Params = FedProxParams

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        plan = super().client_start(broadcast, payload, state, client)
        mu = self.round_params(client).mu  # the round's (it takes a schedule)
        plan.terms = Pull(broadcast["params"], self.federation.layout, mu, "loss")
        return plan
