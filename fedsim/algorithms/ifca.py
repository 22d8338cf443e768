"""IFCA: K cluster models; each client trains the one with the lowest loss on its data.

Ghosh et al., NeurIPS 2020 (the Iterative Federated Clustering Algorithm); code
jichan3751/ifca. Every client downloads the K = ``clusters`` models and evaluates each on its
own training split (mean cross-entropy, eval mode); the lowest loss wins (ties: the smaller
cluster id). It is evaluated with that model, trains it and adds the result to its cluster's
weighted sum (``weighting``: ``samples`` n_k, or ``uniform`` 1: the IFCA code's plain mean),
so workers still reduce before they send. The server replaces each cluster's model by its
mean and keeps it where no client chose it. Every client evaluated in a round (sampled or
not) chooses the same way on its worker; only the sampled clients' choices reach the server.

Initial models: model 0 is the run's initial model; model k > 0 is that model with the
entries of every parameter tensor permuted by a generator seeded with k. Each tensor is drawn
i.i.d. by PyTorch's default initializers, so a permutation of its entries is another draw from
the same distribution: K distinct random inits without building the model here.

State: the K models and the assignment history, one row per round (int8 cluster per client,
-1 where not sampled): ``ifca_clusters.png`` draws it (with the ARI against the true clusters
when the partition has them). On the driver (``personalized_params``, no client data) a
client is evaluated with the cluster it chose the last time it was sampled (cluster 0 if
never).

A held-out client (``eval.holdout_clients``) makes the same estimate on its own train split
and is evaluated with the model it picks; it does not train (``eval.finetune_epochs`` does not
apply). The official code assigns its test machines by their loss on the test data itself;
here the estimate never sees the split it is scored on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.ifca import IFCAParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientStates,
    ClientUpdate,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.clustering import (
    assignment_figure,
    cluster_key,
    cluster_means,
    latest_assignment,
    lowest_loss_cluster,
)
from fedsim.algorithms.registry import register
from fedsim.figures import Figure
from fedsim.streams import IFCA_INIT_SEED
from lightning_modules.flat_params import ParamLayout

IFCA_PNG = "ifca_clusters.png"


def permuted_init(initial: torch.Tensor, layout: ParamLayout, seed: int) -> torch.Tensor:
    """``initial`` with each tensor's entries permuted by a generator seeded with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    out = initial.clone()
    for entry in layout.entries:
        part = initial[entry.offset : entry.offset + entry.numel]
        order = torch.randperm(entry.numel, generator=generator)
        out[entry.offset : entry.offset + entry.numel] = part[order]
    return out


@register
class IFCA(Algorithm):
    """K models; a client picks the lowest-loss one on its training data and trains it."""

    name = "ifca"
    Params = IFCAParams
    newcomer = NewcomerRule(
        rule="the cluster model with the lowest mean loss on its own train split (ties: the "
        "smaller id), as it is",
        source="Ghosh et al. 2020 (IFCA): the cluster identity estimate every client makes "
        "each round, argmin_j of its loss at model j, on the newcomer's own train split",
        adapts=True,
    )
    has_global_model = False  # K cluster models, none of them the federation's

    # --- driver side ---
    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        layout = self.federation.layout
        models = [initial_params.clone()]
        models += [
            permuted_init(initial_params, layout, IFCA_INIT_SEED * 1000 + k)
            for k in range(1, self.params.clusters)
        ]
        return {
            "models": torch.stack(models),
            "assignments": np.zeros((0, self.federation.num_clients), dtype=np.int8),
        }

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        last = latest_assignment(state["assignments"], self.federation.num_clients)
        return {"models": state["models"], "last": last}

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        row = np.full((1, self.federation.num_clients), -1, dtype=np.int8)
        for client, upload in individual.items():
            row[0, client] = upload["cluster"]
        return {
            **state,
            "models": cluster_means(state["models"], sums),
            "assignments": np.concatenate([state["assignments"], row]),
        }

    def figures(
        self, state: ServerState, client_states: ClientStates, round_idx: int
    ) -> list[Figure]:
        """Clients-by-rounds cluster choices (``ifca_clusters.png``)."""
        title = f"IFCA: cluster chosen by each sampled client (K={self.params.clusters})"
        return [assignment_figure(IFCA_PNG, state["assignments"], self.federation, title)]

    # --- worker side ---
    def choose(self, broadcast: dict[str, Any], client: ClientInfo) -> int:
        """The lowest train-loss model (with a probe); else the last choice (0 if none)."""
        if client.probe is None:
            return max(int(broadcast["last"][client.client]), 0)
        return lowest_loss_cluster(client.probe, broadcast["models"])

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        cluster = self.choose(broadcast, client)
        return ClientPlan(train_params=broadcast["models"][cluster], context={"cluster": cluster})

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        cluster = plan.context["cluster"]
        weight = float(client.num_train) if self.params.weighting == "samples" else 1.0
        return ClientUpdate(
            sums={cluster_key(cluster): (weight, trained)}, individual={"cluster": cluster}
        )

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The cluster model a newcomer's own estimate picks (``choose`` with its probe)."""
        if client.probe is None:
            raise ValueError("IFCA's newcomer rule measures the cluster models on its data")
        return broadcast["models"][self.choose(broadcast, client)].clone()

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The K models (the assignment vector is the simulator's, not the protocol's)."""
        return int(broadcast["models"].numel()) * broadcast["models"].element_size()
