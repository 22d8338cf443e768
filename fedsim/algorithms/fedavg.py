"""FedAvg: w = sum_i (n_i / sum n) w_i over the cohort (McMahan et al.; PFLlib serveravg).

The base of the FedAvg family (Flower's ``FedProx(FedAvg)`` economy): FedVG, FedProx,
FedAvgM, SCAFFOLD, FedDyn and Ditto override only what differs. Two settings are shared:

- the aggregation weights, ``algorithm.weighting`` (samples | uniform | fedvg | avg;
  ``aggregation_weights.py``), with FedVG's validation-set keys;
- the server optimizer, ``algorithm.server_optimizer`` (sgd | adagrad | yogi | adam, with
  ``server_lr``, ``server_momentum``, ``beta1``, ``beta2``, ``tau``; ``server_optimizer.py``):
  the defaults (sgd, lr 1, no momentum) make the new model the weighted mean itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fedsim.algorithm_params.fedavg import FedAvgParams
from fedsim.algorithms.aggregation_weights import AggregationWeights, WeightingParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    FederationInfo,
    ModelUpload,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.server_optimizer import ServerOptimizer

if TYPE_CHECKING:
    from fedsim.data.datasets import ImageDataset
    from fedsim.data.federated import FederatedData


@register
class FedAvg(Algorithm):
    """Every client trains the global model; the server steps towards the weighted mean."""

    name = "fedavg"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: McMahan et al. 2017: one global model serves every client",
    )
    Params = FedAvgParams

    def __init__(self, params: WeightingParams, federation: FederationInfo):
        super().__init__(params, federation)
        self.weighting = AggregationWeights(params, federation)

    def server_optimizer(self, p: WeightingParams) -> ServerOptimizer:
        """The server's step from the clients' mean with the keys of ``p`` (a round's params:
        ``server_lr`` and the moments take a schedule; subclasses without the keys override)."""
        return ServerOptimizer(
            lr=p.server_lr, momentum=p.server_momentum, kind=p.server_optimizer,
            beta1=p.beta1, beta2=p.beta2, tau=p.tau,
        )  # fmt: skip

    # --- driver side ---
    def prepare_data(
        self, data: FederatedData, load_dataset: Callable[[str], ImageDataset], seed: int
    ) -> FederatedData:
        return self.weighting.prepare_data(data, load_dataset, seed)

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        server = self.server_optimizer(self.params)  # round 0's keys: its moments' shapes
        return {"params": initial_params.clone(), **server.init(initial_params)}

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        mean = self.weighting.mean(sums, "params")
        if mean is None:
            return state  # nobody finished this round: keep the model
        return self.server_step(state, mean, sums, context)

    def server_step(
        self,
        state: ServerState,
        mean: torch.Tensor,
        sums: dict[str, WeightedSum],
        context: RoundContext,
    ) -> ServerState:
        """The new server state from the clients' weighted mean, by the round's server keys
        (SCAFFOLD, FedDyn extend)."""
        return {**state, **self.server_optimizer(context.algorithm_params).step(state, mean)}

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        return ClientPlan(
            train_params=broadcast["params"],
            train_indices=self.weighting.train_indices(client.client),
        )

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate(sums=self.weighting.contribute("params", trained, plan, client))

    def model_upload(self, client: ClientInfo) -> ModelUpload:
        """The whole trained model; ``params`` and its weighting's parts are its means."""
        return ModelUpload(sums=("params", "params/*"))
