"""FedDyn (Acar et al., ICLR 2021; PFLlib serverdyn/clientdyn). Rules: ALGORITHMS.md.

Client i (state h_i, zeros at first): loss = CE + alpha/2 ||w - g|| - <w, h_i>, the norm
taken over the whole parameter vector; afterwards h_i <- h_i - alpha (w - g).
Server: h <- h - alpha (1/N) sum_i (w_i - g) (N: all clients); g = sum_k w_k w_i - h / alpha,
w_k from ``algorithm.weighting`` (uniform, PFLlib's mean, by default).

``penalty``: ``norm`` (default) is PFLlib's plain L2 norm as ALGORITHMS.md states; the FedDyn
paper squares it (``squared``). Parameters only: float buffers (BatchNorm statistics) get no
term and no h, and are simply averaged.
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

PENALTIES = ("norm", "squared")


@dataclass
class FedDynParams(WeightingParams):
    """``algorithm.*`` keys of FedDyn: alpha, the penalty form and the weighting keys."""

    weighting: str = "uniform"
    alpha: float = 0.01
    penalty: str = "norm"  # norm (PFLlib, ALGORITHMS.md) | squared (the FedDyn paper)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.alpha > 0:
            raise ConfigError("algorithm.alpha", self.alpha, "must be > 0")
        if self.penalty not in PENALTIES:
            raise ConfigError("algorithm.penalty", self.penalty, "allowed: norm, squared")


class DynamicRegularizer:
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
        device = next(iter(params.values())).device
        anchor, h = self.anchor.on(device), self.h.on(device)
        if not self.parameter_names:
            self.parameter_names = list(params)
        diff = torch.cat([(p - anchor[n]).reshape(-1) for n, p in params.items()])
        distance = diff.pow(2).sum() if self.squared else torch.linalg.vector_norm(diff)
        linear = sum((p * h[n]).sum() for n, p in params.items())
        return 0.5 * self.alpha * distance - linear

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        return None


@register
class FedDyn(WeightedFedAvg):
    """Dynamic regularization: each client's linear term tracks its drift from the server."""

    name = "feddyn"
    Params = FedDynParams
    uses_client_state = True  # h_i

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        return {"params": initial_params.clone(), "h": torch.zeros_like(initial_params)}

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
            self.params.alpha,
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
        h_new = plan.context["h_local"] - self.params.alpha * drift
        sums = self.weighting.contribute("params", trained, plan, client)
        sums["drift"] = (1.0, drift)
        return ClientUpdate(sums=sums, state={"h": h_new})

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
        alpha = self.params.alpha
        drift = (sums["drift"].value / self.federation.num_clients).to(torch.float32)
        h = state["h"] - alpha * drift
        return {**state, "params": mean - h / alpha, "h": h}
