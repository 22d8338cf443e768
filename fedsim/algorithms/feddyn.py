"""FedDyn (Acar et al., ICLR 2021; PFLlib serverdyn/clientdyn). Rules: docs/algorithms.md, "feddyn".

Client i (state h_i, zeros at first): loss = CE + alpha/2 ||w - g|| - <w, h_i>, the norm
taken over the whole parameter vector; afterwards h_i <- h_i - alpha (w - g).
Server: h <- h - alpha (1/N) sum_i (w_i - g) (N: all clients); g = sum_k w_k w_i - h / alpha,
w_k from ``algorithm.weighting`` (uniform, PFLlib's mean, by default).

``penalty``: ``norm`` (default) is PFLlib's plain L2 norm; the FedDyn
paper squares it (``squared``). Parameters only: float buffers (BatchNorm statistics) get no
term and no h, and are simply averaged.
"""

from __future__ import annotations

from typing import Any

import torch

from fedsim.algorithm_params.feddyn import FedDynParams
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
from fedsim.sizes import nbytes
from lightning_modules.flat_params import ParamLayout
from lightning_modules.hooks import ClientTerms


class DynamicRegularizer(ClientTerms):
    """Client term alpha/2 ||w - g|| (or squared) - <w, h_i>; remembers which names it saw."""

    def __init__(
        self,
        global_params: torch.Tensor,
        h_local: torch.Tensor,
        layout: ParamLayout,
        alpha: float,
        squared: bool,
    ):
        self.anchor, self.h = NamedViews(global_params, layout), NamedViews(h_local, layout)
        self.alpha, self.squared = alpha, squared
        self.parameter_names: list[str] = []

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        if not params:
            return None
        device = device_of(params)
        anchor, h = self.anchor.on(device), self.h.on(device)
        if not self.parameter_names:
            self.parameter_names = list(params)
        diff = torch.cat([(p - anchor[n]).reshape(-1) for n, p in params.items()])
        distance = diff.pow(2).sum() if self.squared else torch.linalg.vector_norm(diff)
        linear = sum((p * h[n]).sum() for n, p in params.items())
        return 0.5 * self.alpha * distance - linear


@register
class FedDyn(FedAvg):
    """Dynamic regularization: each client's linear term tracks its drift from the server."""

    name = "feddyn"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Acar et al. 2021: "
        "the server model; a client's own h_i acts only in its training",
    )
    Params = FedDynParams

    def server_optimizer(self, p: FedDynParams) -> ServerOptimizer:  # type: ignore[override]
        """Unused: FedDyn's server has its own rule (``server_step``)."""
        return ServerOptimizer()

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        return {**super().init_state(initial_params), "h": torch.zeros_like(initial_params)}

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        plan = super().client_start(broadcast, payload, state, client)
        h_local = state["h"] if state is not None else torch.zeros_like(broadcast["params"])
        plan.terms = DynamicRegularizer(
            broadcast["params"],
            h_local,
            self.federation.layout,
            self.round_params(client).alpha,
            self.params.penalty == "squared",
        )
        plan.context.update(h_local=h_local, global_params=broadcast["params"])
        return plan

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        assert isinstance(plan.terms, DynamicRegularizer)
        layout = self.federation.layout
        drift = torch.zeros_like(trained)
        for name in plan.terms.parameter_names:  # w - g on the parameters (none: no step)
            s = layout.slice_of(name)
            drift[s] = trained[s] - plan.context["global_params"][s]
        h_new = plan.context["h_local"] - self.round_params(client).alpha * drift
        update = super().client_finish(plan, trained, state, client)
        update.sums["drift"] = (1.0, drift)
        update.state = {"h": h_new}
        return update

    def upload_nbytes(self, update: ClientUpdate) -> int:
        """The trained model only: the server derives the drift w_i - g from it and the g it
        sent (the drift sum is the simulator's shortcut, not an upload)."""
        return nbytes([value for key, (_, value) in update.sums.items() if key != "drift"])

    def server_step(
        self,
        state: ServerState,
        mean: torch.Tensor,
        sums: dict[str, WeightedSum],
        context: RoundContext,
    ) -> ServerState:
        """h <- h - alpha (1/N) sum_i (w_i - g); g = mean - h / alpha."""
        alpha = context.algorithm_params.alpha
        drift = (sums["drift"].value / self.federation.num_clients).to(torch.float32)
        h = state["h"] - alpha * drift
        return {**state, "params": mean - h / alpha, "h": h}
