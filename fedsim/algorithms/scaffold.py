"""SCAFFOLD (Karimireddy et al., ICML 2020; PFLlib serverscaffold/clientscaffold).

Client i holds a control variate c_i (its private state, kept by the driver's client state
store); the server holds x and c. Each local step: y <- y - lr (grad + c - c_i), applied as a
gradient correction. After K steps, c_i+ = c_i - c + (x - y) / (K lr). The client uploads
dy = y - x and dc = c_i+ - c_i; the server sets x += eta_g * sum_k w_k dy_k and
c += (1/N) sum dc (N: all clients), so on full participation c stays the mean of the c_i.
w_k: ``algorithm.weighting``, uniform by default (PFLlib's mean; FedVG + SCAFFOLD:
``weighting=fedvg``).

Under plain SGD, y = x - lr sum_t (g_t + c - c_i), so c_i - c + (x - y)/(K lr) is exactly the
mean raw gradient (1/K) sum_t g_t. That is what the client computes: it needs neither lr nor
K from the config. With client momentum or weight decay the two differ (PFLlib uses neither).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.weighting import NamedViews, WeightedFedAvg, WeightingParams
from fedsim.errors import ConfigError
from lightning_modules.flat_params import ParamLayout


@dataclass
class ScaffoldParams(WeightingParams):
    """``algorithm.*`` keys of SCAFFOLD: the server step eta_g and the weighting keys."""

    weighting: str = "uniform"
    global_lr: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.global_lr > 0:
            raise ConfigError("algorithm.global_lr", self.global_lr, "must be > 0")


class ControlVariateCorrection:
    """Client term: grad += c - c_i before each step; sums the raw gradients for c_i+."""

    def __init__(self, correction: torch.Tensor, layout: ParamLayout):
        self.correction = NamedViews(correction, layout)
        self.layout = layout
        self.gradient_sum: torch.Tensor | None = None
        self.steps = 0

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        return None

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        if not params:
            return
        device = next(iter(params.values())).device
        correction = self.correction.on(device)
        if self.gradient_sum is None:
            self.gradient_sum = torch.zeros(self.layout.total, dtype=torch.float32, device=device)
        for name, p in params.items():
            if p.grad is None:
                continue
            self.layout.view(self.gradient_sum, name).add_(p.grad)
            p.grad.add_(correction[name])
        self.steps += 1

    def mean_gradient(self) -> torch.Tensor | None:
        """(1/K) sum_t g_t on the CPU; None if the client took no step."""
        if self.gradient_sum is None or self.steps == 0:
            return None
        return (self.gradient_sum / self.steps).to("cpu")


@register
class Scaffold(WeightedFedAvg):
    """Control variates correct client drift; the server steps x and c."""

    name = "scaffold"
    Params = ScaffoldParams
    uses_client_state = True  # c_i

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        return {"params": initial_params.clone(), "c": torch.zeros_like(initial_params)}

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        return {"params": state["params"], "c": state["c"]}

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        plan = super().client_start(broadcast, payload, state, client)
        c_local = _local_c(state, broadcast["c"])
        plan.terms = ControlVariateCorrection(broadcast["c"] - c_local, self.federation.layout)
        plan.context["c_local"] = c_local
        return plan

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        c_local = plan.context["c_local"]
        assert isinstance(plan.terms, ControlVariateCorrection)
        c_new = plan.terms.mean_gradient()
        if c_new is None:
            c_new = c_local.clone()
        sums = self.weighting.contribute("params", trained, plan, client)
        sums["dc"] = (1.0, c_new - c_local)
        return ClientUpdate(sums=sums, state={"c": c_new})

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
        x = state["params"]
        # x += eta_g sum_k w_k (y_k - x) = eta_g (sum_k w_k y_k - x), as sum_k w_k = 1
        params = x + self.params.global_lr * (mean - x)
        dc = sums["dc"].value
        c = state["c"] + (dc / self.federation.num_clients).to(torch.float32)
        return {**state, "params": params, "c": c}


def _local_c(state: ClientState | None, c_global: torch.Tensor) -> torch.Tensor:
    """The client's c_i: zeros before its first round."""
    if state is None or "c" not in state:
        return torch.zeros_like(c_global)
    return state["c"]
