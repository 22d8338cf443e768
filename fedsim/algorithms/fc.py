"""FC: clustered federated learning by recursive bipartitioning (CFL).

Sattler, Mueller, Samek, "Clustered Federated Learning", IEEE TNNLS 2020; code
felisat/clustered-federated-learning (``fl_devices.py`` Server, the notebook's loop).
All clients start in one cluster. Each sampled client trains its cluster's model and uploads
its update dW_k = trained - start individually (the split needs every update). Per cluster c,
over its sampled clients:

    mean_norm = || mean_k dW_k ||,  max_norm = max_k || dW_k ||

If round >= ``split_after`` (the code's ``c_round > 20``, counted from 1), the cluster has
more than 2 sampled clients, mean_norm < ``eps1`` and max_norm > ``eps2``, it is split in two
by complete-linkage agglomerative clustering of the pairwise cosine similarities of the dW_k
(the code's ``AgglomerativeClustering(linkage="complete")`` on -S). Then every cluster's model
moves by the plain mean of its sampled clients' dW_k (the code's ``reduce_add_average``); a
cluster without sampled clients keeps its model. A new cluster starts from its parent's model.

A split keeps the parent's id for the half that holds the smallest client id; the other half
gets the next id. Partial participation (the code samples every client): members of a split
cluster that were not sampled join the larger half (ties: the half keeping the parent's id).

State: one model per cluster, each client's cluster, the membership after every round
(``fc_clusters.png``) and the cluster tree: one row (round, parent, kept id, new id) per
split. A client is evaluated with its cluster's model.

A held-out client (``eval.holdout_clients``) has no cluster: CFL places a client by the
direction of its updates, and the state keeps neither the updates nor a representative of
either side of a split. It takes IFCA's estimate instead (``clustering.lowest_loss_cluster``):
the cluster model with the lowest mean loss on its own train split, the model that fits its
data best among those the federation trained; before any split that is the one model. It does
not train (``eval.finetune_epochs`` does not apply).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.fc import FCParams
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
from fedsim.algorithms.clustering import assignment_figure, lowest_loss_cluster
from fedsim.algorithms.registry import register
from fedsim.figures import Figure

FC_PNG = "fc_clusters.png"


def cosine_similarities(updates: torch.Tensor) -> np.ndarray:
    """(n, n) pairwise cosine similarities of the rows of ``updates`` (float64)."""
    rows = updates.to(torch.float64)
    norms = torch.linalg.vector_norm(rows, dim=1).clamp(min=1e-12)
    unit = rows / norms[:, None]
    return (unit @ unit.T).numpy()


def complete_linkage_bipartition(similarity: np.ndarray) -> tuple[list[int], list[int]]:
    """Two groups (positions, ascending) by complete-linkage agglomeration on -similarity:
    repeatedly merge the two groups whose least similar pair is most similar (ties: the pair
    of groups that comes first), until two remain. The first group holds position 0."""
    groups = [[i] for i in range(len(similarity))]
    while len(groups) > 2:
        best, pair = -np.inf, (0, 1)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                link = float(similarity[np.ix_(groups[a], groups[b])].min())
                if link > best:
                    best, pair = link, (a, b)
        a, b = pair
        groups[a] = sorted(groups[a] + groups[b])
        del groups[b]
    first, second = sorted(groups, key=lambda g: g[0])
    return first, second


def split_decision(updates: torch.Tensor, eps1: float, eps2: float) -> tuple[bool, float, float]:
    """(split?, mean update norm, max update norm) of one cluster's (n, P) updates."""
    mean_norm = float(torch.linalg.vector_norm(updates.to(torch.float64).mean(dim=0)))
    max_norm = float(torch.linalg.vector_norm(updates.to(torch.float64), dim=1).max())
    return len(updates) > 2 and mean_norm < eps1 and max_norm > eps2, mean_norm, max_norm


@register
class FC(Algorithm):
    """Clustered FL: one cluster at first, split by update similarity once FedAvg stalls."""

    name = "fc"
    Params = FCParams
    newcomer = NewcomerRule(
        rule="the cluster model with the lowest mean loss on its own train split (ties: the "
        "smaller id; before any split, the one model), as it is",
        source="fedsim's choice: CFL assigns clients by their updates' directions, which a "
        "newcomer never uploaded and the tree does not keep; IFCA's estimate stands in",
        adapts=True,
    )
    has_global_model = False  # one model per cluster once a split happened

    # --- driver side ---
    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        n = self.federation.num_clients
        return {
            "models": initial_params.unsqueeze(0).clone(),
            "membership": np.zeros(n, dtype=np.int16),
            "history": np.zeros((0, n), dtype=np.int16),
            "tree": np.zeros((0, 4), dtype=np.int64),
        }

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        return {"models": state["models"], "membership": state["membership"]}

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        """Split the clusters that qualify, then move each by its clients' mean update."""
        models = list(state["models"].clone())
        membership = state["membership"].copy()
        tree = [state["tree"]]
        for cluster in range(len(models)):
            clients = sorted(c for c in individual if individual[c]["cluster"] == cluster)
            if not clients or context.round < self.params.split_after:
                continue
            updates = torch.stack([individual[c]["update"] for c in clients])
            split, _, _ = split_decision(updates, self.params.eps1, self.params.eps2)
            if not split:
                continue
            first, second = complete_linkage_bipartition(cosine_similarities(updates))
            new_id = len(models)
            models.append(models[cluster].clone())
            moved = [clients[i] for i in second]
            absent = [
                c for c in np.flatnonzero(membership == cluster).tolist() if c not in individual
            ]
            if len(second) > len(first):
                moved += absent
            membership[moved] = new_id
            tree.append(np.array([[context.round, cluster, cluster, new_id]], dtype=np.int64))
        for cluster in range(len(models)):
            clients = sorted(c for c in individual if membership[c] == cluster)
            if clients:
                mean = torch.stack([individual[c]["update"] for c in clients]).to(torch.float64)
                models[cluster] = (models[cluster].to(torch.float64) + mean.mean(dim=0)).to(
                    torch.float32
                )
        return {
            "models": torch.stack(models),
            "membership": membership,
            "history": np.concatenate([state["history"], membership[None, :]]),
            "tree": np.concatenate(tree),
        }

    def figures(
        self, state: ServerState, client_states: ClientStates, round_idx: int
    ) -> list[Figure]:
        """Clients-by-rounds cluster membership (``fc_clusters.png``); splits in the title."""
        splits = ", ".join(f"{p}->{a}+{b}@r{r}" for r, p, a, b in state["tree"].tolist())
        title = f"FC: {len(state['models'])} clusters (splits: {splits or 'none'})"
        panel = "cluster after each round"
        return [assignment_figure(FC_PNG, state["history"], self.federation, title, panel)]

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """A client receives its own cluster's model only."""
        return int(broadcast["models"][0].numel()) * broadcast["models"].element_size()

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        cluster = int(broadcast["membership"][client.client])
        return ClientPlan(train_params=broadcast["models"][cluster], context={"cluster": cluster})

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The cluster model with the lowest loss on the newcomer's train split."""
        models = broadcast["models"]
        if len(models) == 1:  # nothing to choose: no pass over its data
            return models[0].clone()
        if client.probe is None:
            raise ValueError("FC's newcomer rule measures the cluster models on its data")
        return models[lowest_loss_cluster(client.probe, models)].clone()

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        update = trained - plan.train_params
        return ClientUpdate(individual={"cluster": plan.context["cluster"], "update": update})
