"""The server optimizer of the FedAvg family (Reddi et al., "Adaptive Federated
Optimization", FedOpt with server SGD; FedJAX's ``server_optimizer``).

The clients' weighted mean gives the pseudo-gradient d = theta - mean; the server takes one
step of SGD with momentum (torch's rule) on it: v <- momentum v + d; theta <- theta - lr v.
lr 1 and momentum 0 is FedAvg (theta becomes the mean), momentum 0.9 FedAvgM (Hsu et al.,
2019), momentum 0 and lr eta_g SCAFFOLD's global step x += eta_g (mean - x).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedsim.algorithms.base import ServerState


@dataclass(frozen=True)
class ServerOptimizer:
    """Server SGD on the pseudo-gradient; its momentum buffer lives in the server state.

    ``exact_mean``: with lr 1 and no momentum, return the mean itself (theta - (theta - mean)
    rounds differently from it). SCAFFOLD's results were recorded with the step always taken,
    so it turns this off.
    """

    lr: float = 1.0
    momentum: float = 0.0
    exact_mean: bool = True

    def init(self, params: torch.Tensor) -> ServerState:
        """The optimizer's entries of the initial server state (the momentum buffer, if any)."""
        return {"momentum": torch.zeros_like(params)} if self.momentum > 0 else {}

    def step(self, state: ServerState, mean: torch.Tensor) -> ServerState:
        """The new ``params`` (and ``momentum``) from the state and the clients' mean."""
        if self.exact_mean and self.lr == 1.0 and self.momentum == 0.0:
            return {"params": mean}
        update = state["params"] - mean  # the pseudo-gradient
        out: ServerState = {}
        if self.momentum > 0:
            update = self.momentum * state["momentum"] + update
            out["momentum"] = update
        out["params"] = state["params"] - self.lr * update
        return out
