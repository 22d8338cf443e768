"""SCAFFOLD (Karimireddy et al., ICML 2020; PFLlib serverscaffold/clientscaffold).

Client i holds a control variate c_i (its private state, kept by the driver's client state
store); the server holds x and c. Each local step: y <- y - lr (grad + c - c_i), applied as a
gradient correction. After K steps, c_i+ = c_i - c + (x - y) / (K lr). The client uploads
dy = y - x and dc = c_i+ - c_i; the server sets x += eta_g * sum_k w_k dy_k and
c += (1/N) sum dc (N: all clients), so on full participation c stays the mean of the c_i.
w_k: ``algorithm.weighting``, uniform by default (PFLlib's mean; FedVG + SCAFFOLD:
``weighting=fedvg``). The x step is FedAvg's server optimizer with lr eta_g
(``algorithm.global_lr``) and no momentum: as sum_k w_k = 1,
x + eta_g sum_k w_k (y_k - x) = x - eta_g (x - sum_k w_k y_k).

Under plain SGD, y = x - lr sum_t (g_t + c - c_i), so c_i - c + (x - y)/(K lr) is exactly the
mean raw gradient (1/K) sum_t g_t. That is what the client computes: it needs neither lr nor
K from the config. With client momentum or weight decay the two differ (PFLlib uses neither).
"""

from __future__ import annotations

from typing import Any

import torch

from fedsim.algorithm_params.scaffold import ScaffoldParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.param_views import NamedViews, device_of
from fedsim.algorithms.registry import register
from fedsim.algorithms.server_optimizer import ServerOptimizer
from lightning_modules.flat_params import ParamLayout
from lightning_modules.hooks import ClientTerms


class ControlVariateCorrection(ClientTerms):
    """Client term: grad += c - c_i before each step; sums the raw gradients for c_i+."""

    def __init__(self, correction: torch.Tensor, layout: ParamLayout):
        self.correction = NamedViews(correction, layout)
        self.layout = layout
        self.gradient_sum: torch.Tensor | None = None
        self.steps = 0

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        if not params:
            return
        device = device_of(params)
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
class Scaffold(FedAvg):
    """Control variates correct client drift; the server steps x and c."""

    name = "scaffold"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Karimireddy et al. 2020: "
        "the server model x (control variates act only in training)",
    )
    Params = ScaffoldParams

    def server_optimizer(self, p: ScaffoldParams) -> ServerOptimizer:  # type: ignore[override]
        """x - eta_g (x - mean), the step always taken (recorded results: also at eta_g 1)."""
        return ServerOptimizer(
            lr=p.global_lr, exact_mean=False, kind=p.server_optimizer,
            beta1=p.beta1, beta2=p.beta2, tau=p.tau,
        )  # fmt: skip

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        return {**super().init_state(initial_params), "c": torch.zeros_like(initial_params)}

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
        update = super().client_finish(plan, trained, state, client)
        update.sums["dc"] = (1.0, c_new - c_local)
        update.state = {"c": c_new}
        return update

    def server_step(
        self,
        state: ServerState,
        mean: torch.Tensor,
        sums: dict[str, WeightedSum],
        context: RoundContext,
    ) -> ServerState:
        """x by the server optimizer; c += (1/N) sum dc."""
        dc = sums["dc"].value
        c = state["c"] + (dc / self.federation.num_clients).to(torch.float32)
        return {**super().server_step(state, mean, sums, context), "c": c}


def _local_c(state: ClientState | None, c_global: torch.Tensor) -> torch.Tensor:
    """The client's c_i: zeros before its first round."""
    if state is None or "c" not in state:
        return torch.zeros_like(c_global)
    return state["c"]
