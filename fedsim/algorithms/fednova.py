"""FedNova: normalized averaging, for clients that do unequal amounts of local work.

Wang et al., "Tackling the Objective Inconsistency Problem in Heterogeneous Federated
Optimization", NeurIPS 2020; official code JYWa/FedNova (``distoptim/FedNova.py``: the
optimizer's ``step`` and ``average``), cross-checked with NIID-Bench. Rules:
docs/algorithms.md, "fednova". Client k trains the global model x for its tau_k local SGD
steps (``client.epochs`` or ``client.epochs_by_client``, times ceil(n_k / batch)) and
uploads its normalized update d_k = (x - y_k) / tau_k; the server sets
x <- x - tau_eff sum_k p_k d_k with tau_eff = sum_k p_k tau_k and p_k = n_k / sum n over the
clients that finished (the official ``average()`` with gmf 0 and server lr 1). With equal
tau_k this is FedAvg; FedAvg weighs client k's normalized update by p_k tau_k instead.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    ModelUpload,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register


@register
class FedNova(Algorithm):
    """Each client's update divided by its local steps; the mean scaled by the mean steps."""

    name = "fednova"
    counts_local_epochs = True  # tau_k = epochs x ceil(n_k / batch)
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Wang et al. 2020: "
        "FedAvg's one global model (normalized averaging only changes how it is made)",
    )
    Params = AlgorithmParams

    def local_steps(self, plan: ClientPlan, client: ClientInfo) -> int:
        """tau_k: the client's local SGD steps this round (a_k of the official optimizer
        without momentum or proximal term)."""
        n = client.num_train if plan.train_indices is None else len(plan.train_indices)
        epochs = client.epochs if plan.epochs is None else plan.epochs
        return int(epochs) * math.ceil(n / self.federation.batch_size)

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        d, tau = sums.get("d"), sums.get("tau")
        if d is None or tau is None or d.value is None or tau.value is None or d.weight <= 0:
            return state  # nobody finished this round: keep the model
        tau_eff = tau.value / tau.weight  # (1,) float64: sum_k p_k tau_k
        step = tau_eff * (d.value / d.weight)  # tau_eff sum_k p_k d_k, float64
        return {**state, "params": (state["params"].double() - step).to(torch.float32)}

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        tau = self.local_steps(plan, client)
        if tau == 0:
            return ClientUpdate()  # no step: nothing to add
        n = float(client.num_train if plan.train_indices is None else len(plan.train_indices))
        d = (plan.train_params - trained) / tau
        return ClientUpdate(sums={"d": (n, d), "tau": (n, torch.tensor([float(tau)]))})

    def model_upload(self, client: ClientInfo) -> ModelUpload:
        """The whole trained model; no sum is its plain mean (each is divided by tau_k)."""
        return ModelUpload(sums=())
