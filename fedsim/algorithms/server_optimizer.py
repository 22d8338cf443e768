"""The server optimizer of the FedAvg family (Reddi et al., "Adaptive Federated
Optimization", ICLR 2021: FedOpt; FedJAX's ``server_optimizer``).

The clients' weighted mean gives the model update Delta = mean - theta (the negative
pseudo-gradient). ``algorithm.server_optimizer``:

- ``sgd`` (default): server SGD with momentum on the pseudo-gradient d = -Delta (torch's rule):
  v <- momentum v + d; theta <- theta - lr v. lr 1 and momentum 0 is FedAvg (theta becomes
  the mean), momentum 0.9 FedAvgM (Hsu et al., 2019), lr eta_g SCAFFOLD's global step;
- ``adagrad`` / ``yogi`` / ``adam``: the paper's Algorithm 2, exactly (no bias correction):
  m <- beta1 m + (1 - beta1) Delta;
  adagrad: v <- v + Delta^2;  yogi: v <- v - (1 - beta2) Delta^2 sign(v - Delta^2);
  adam: v <- beta2 v + (1 - beta2) Delta^2;
  theta <- theta + lr m / (sqrt(v) + tau), with m starting at 0 and v at tau^2 (the paper's
  v_{-1} >= tau^2). FedAdam / FedYogi / FedAdagrad are FedAvg with these; they combine with
  FedProx's clients, SCAFFOLD's control variates and FedVG's weights, which only change the
  mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedsim.algorithms.base import ServerState

ADAPTIVE = ("adagrad", "yogi", "adam")


@dataclass(frozen=True)
class ServerOptimizer:
    """The server's step from the clients' mean; its moments live in the server state.

    ``exact_mean``: with sgd, lr 1 and no momentum, return the mean itself (theta - (theta -
    mean) rounds differently from it). SCAFFOLD's results were recorded with the step always
    taken, so it turns this off.
    """

    lr: float = 1.0
    momentum: float = 0.0
    exact_mean: bool = True
    kind: str = "sgd"  # sgd | adagrad | yogi | adam
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3

    def init(self, params: torch.Tensor) -> ServerState:
        """The optimizer's entries of the initial server state (its moments, if any)."""
        if self.kind in ADAPTIVE:
            return {
                "server_m": torch.zeros_like(params),
                "server_v": torch.full_like(params, self.tau**2),
            }
        return {"momentum": torch.zeros_like(params)} if self.momentum > 0 else {}

    def step(self, state: ServerState, mean: torch.Tensor) -> ServerState:
        """The new ``params`` (and moments) from the state and the clients' mean."""
        if self.kind in ADAPTIVE:
            return self._adaptive_step(state, mean)
        if self.exact_mean and self.lr == 1.0 and self.momentum == 0.0:
            return {"params": mean}
        update = state["params"] - mean  # the pseudo-gradient
        out: ServerState = {}
        if self.momentum > 0:  # a scheduled momentum may start at 0: no buffer yet
            previous = state.get("momentum")
            if previous is None:
                previous = torch.zeros_like(update)
            update = self.momentum * previous + update
            out["momentum"] = update
        out["params"] = state["params"] - self.lr * update
        return out

    def _adaptive_step(self, state: ServerState, mean: torch.Tensor) -> ServerState:
        delta = mean - state["params"]
        m = self.beta1 * state["server_m"] + (1 - self.beta1) * delta
        square, v = delta * delta, state["server_v"]
        if self.kind == "adagrad":
            v = v + square
        elif self.kind == "yogi":
            v = v - (1 - self.beta2) * square * torch.sign(v - square)
        else:  # adam
            v = self.beta2 * v + (1 - self.beta2) * square
        params = state["params"] + self.lr * m / (torch.sqrt(v) + self.tau)
        return {"params": params, "server_m": m, "server_v": v}
