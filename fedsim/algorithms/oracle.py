"""Oracle: FedAvg within each client's true cluster, with equal weights.

The upper baseline of SP-CACW's experiments (the seed's SP-CACW experiments: "only same-cluster
peers, equal weights"). The clusters come from the partition (``relabel``, ``rotation`` with
clusters, ``clustered``: ``FederationInfo.client_clusters``); a partition without clusters is
refused up front. One model per cluster: a client trains and is evaluated with its cluster's
model, and the server replaces each cluster's model by the plain mean of its sampled clients'
trained models (kept where none of them was sampled). Workers reduce one sum per cluster.
A held-out client (``eval.holdout_clients``) is evaluated with its own true cluster's model
(``FederationInfo.newcomer_clusters``): the oracle knows every client's cluster.
"""

from __future__ import annotations

from typing import Any

import torch

from fedsim.algorithms.base import (
    Algorithm,
    AlgorithmParams,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    FederationInfo,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.clustering import cluster_key, cluster_means
from fedsim.algorithms.registry import register
from fedsim.errors import ConfigError


def true_clusters(federation: FederationInfo, algorithm: str) -> list[int]:
    """The partition's cluster of every client; a one-line ConfigError when there is none."""
    if federation.client_clusters is None:
        raise ConfigError(
            "data.partition.name",
            federation.partition or None,
            f"has no clusters, and algorithm.name={algorithm} needs the true clusters: use "
            "relabel, rotation with data.partition.clusters, or clustered",
        )
    return [int(c) for c in federation.client_clusters]


@register
class Oracle(Algorithm):
    """One model per true cluster; the uniform mean of that cluster's sampled clients."""

    name = "oracle"
    Params = AlgorithmParams
    newcomer = NewcomerRule(
        rule="its true cluster's model, as it is",
        source="fedsim's choice: the oracle knows every client's true cluster, a newcomer's "
        "too (the partition's)",
    )
    has_global_model = False  # one model per true cluster

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        super().__init__(params, federation)
        self.clusters = true_clusters(federation, self.name)
        # a model for every cluster a held-out client may belong to (one nobody trains in
        # stays the initial model)
        newcomers = [int(c) for c in federation.newcomer_clusters or []]
        self.num_clusters = max(self.clusters + newcomers) + 1

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        """Every cluster starts from the initial model."""
        return {"models": initial_params.unsqueeze(0).repeat(self.num_clusters, 1)}

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        return {"models": state["models"]}

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        return {**state, "models": cluster_means(state["models"], sums)}

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """A client receives its own cluster's model only."""
        return int(broadcast["models"][0].numel()) * broadcast["models"].element_size()

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        cluster = self.clusters[client.client]
        return ClientPlan(train_params=broadcast["models"][cluster], context={"cluster": cluster})

    def newcomer_cluster(self, client: ClientInfo) -> int:
        """A held-out client's true cluster (its id counts on from ``num_clients``)."""
        clusters = self.federation.newcomer_clusters
        position = client.client - self.federation.num_clients
        if clusters is None or not 0 <= position < len(clusters):
            raise ValueError(f"Oracle: no true cluster for held-out client {client.client}")
        return int(clusters[position])

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The model of the newcomer's true cluster."""
        return broadcast["models"][self.newcomer_cluster(client)].clone()

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate(sums={cluster_key(plan.context["cluster"]): (1.0, trained)})
