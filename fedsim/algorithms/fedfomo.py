"""FedFomo: each client weights downloaded peer models by how much they help on its own data.

Zhang et al., ICLR 2021; PFLlib ``servers/serverfomo.py``, ``clients/clientfomo.py``. Rules:
docs/algorithms.md, "fedfomo".

Server: an affinity matrix P (identity at start). Client i downloads the M = ``peers``
models with the largest P[i, j] (ties by client id; only clients that have uploaded a model,
so none at round 0), including its own last upload while P[i, i] stays on top, as PFLlib.
Client: holds out ``val_ratio`` (20%) of its training split as validation (a fixed, per-client
seeded subset) and trains on the rest. At the start of a round, for each downloaded theta_n:

    w_n = (L(old) - L(theta_n)) / (||theta_n - old|| + 1e-5),  L = mean CE on validation,

weights max(w_n, 0) normalized to sum 1; its model becomes sum_n w_n theta_n, or stays as it
was if every w_n <= 0. That model is evaluated (the shared protocol: after personalization,
before training) and trained; the client uploads it and its raw w (P[i, n] += w_n).

``old`` (``reference``): ``start`` (default, PFLlib's ``old_model``) is the model the client
started its previous training from; ``trained`` (the paper's theta_i^{t-1}) is its current,
last-trained model. Either way "stays as it was" keeps the current model (PFLlib).

Memory: the server needs every client's latest upload (any client may be among anyone's top
M), so it keeps them in its own spillable store (``fedsim.storage``; ``server_memory_gb``,
beyond it on disk; a checkpoint holds the models, not the spill files); each client's own
model (and ``start``) is its private state in the driver's client store. A round moves M
models per client.

Held-out clients (``eval.holdout_clients``): a newcomer has no row of P. It downloads the M
uploaded models the federation found most useful (the largest sums over the other clients i
of P[i, j], ties by id) and makes FedFomo's update on its own validation part, with the
uniform mean of those models as both ``old`` and the current model: it is evaluated with the
re-weighted mix, or with the mean if no model beats it (the initial model before anyone
uploaded). It does not train (``eval.finetune_epochs`` does not apply): a FedFomo client is
evaluated on its mix before training too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.fedfomo import FedFomoParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientUpdate,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register
from fedsim.sizes import nbytes
from fedsim.storage import ClientStateStore
from fedsim.streams import FEDFOMO_VAL_TAG


def split_validation(
    train: np.ndarray, val_ratio: float, client: int
) -> tuple[np.ndarray, np.ndarray]:
    """(train part, validation part): a per-client seeded ``val_ratio`` share, at least one."""
    train = np.asarray(train, dtype=np.int64)
    n_val = int(val_ratio * len(train))
    if len(train) >= 2:
        n_val = min(max(n_val, 1), len(train) - 1)
    else:
        n_val = 0
    rng = np.random.default_rng([client, FEDFOMO_VAL_TAG])  # the client's alone
    held = np.zeros(len(train), dtype=bool)
    held[rng.choice(len(train), size=n_val, replace=False)] = True
    return train[~held], train[held]


def fomo_weights(old_loss: float, peer_losses: list[float], distances: list[float]) -> torch.Tensor:
    """Raw w_n = (L(old) - L(theta_n)) / (||theta_n - old|| + 1e-5), float64."""
    losses = torch.tensor(peer_losses, dtype=torch.float64)
    dist = torch.tensor(distances, dtype=torch.float64)
    return (old_loss - losses) / (dist + 1e-5)


def combine(
    current: torch.Tensor, peers: list[torch.Tensor], raw: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum_n w_n theta_n with w = max(raw, 0) / sum, those w); ``current`` if all <= 0."""
    weights = raw.clamp(min=0)
    total = float(weights.sum())
    if not peers or total <= 0:
        return current, torch.zeros_like(raw)
    weights = weights / total
    mixed = torch.zeros(current.numel(), dtype=torch.float64)
    for w, theta in zip(weights.tolist(), peers, strict=True):
        if w > 0:
            mixed += w * theta.to(torch.float64)
    return mixed.to(torch.float32), weights


def validation_loss(probe: ClientProbe, params: torch.Tensor, indices: np.ndarray) -> float:
    """Mean CE of ``params`` on ``indices`` (eval mode)."""
    result = probe.evaluate(params, indices)
    return result.loss_sum / max(result.num_samples, 1)


@register
class FedFomo(Algorithm):
    """First-order model optimization: personal mixes of the most useful peers' models."""

    name = "fedfomo"
    Params = FedFomoParams
    newcomer = NewcomerRule(
        rule="FedFomo's re-weighting, on its own validation part, of the M models the "
        "federation weighted most, from their uniform mean (the mean if none beats it)",
        source="fedsim's choice: a newcomer has no affinity row or model of its own; the "
        "paper's update with the received models' mean as the old model",
        adapts=True,
    )
    has_global_model = False  # broadcast["params"] is the initial model, never trained

    # --- driver side ---
    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        """P = identity; an empty store for the server's copies of client models."""
        gb = self.params.server_memory_gb
        n = self.federation.num_clients
        return {
            "params": initial_params.clone(),
            "affinity": torch.eye(n, dtype=torch.float64),
            "models": ClientStateStore(None if gb is None else int(gb * 2**30)),
        }

    def top_peers(self, state: ServerState, client: int) -> list[int]:
        """The M uploaded clients with the largest P[client, j] (ties: smaller id first)."""
        row = state["affinity"][client]
        candidates = state["models"].clients()
        ranked = sorted(candidates, key=lambda j: (-float(row[j]), j))
        return ranked[: self.params.peers]

    def client_payload(self, state: ServerState, client: int) -> dict[str, Any]:
        ids = self.top_peers(state, client)
        return {"peer_ids": ids, "peers": [state["models"].get(j)["params"] for j in ids]}

    def newcomer_peers(self, state: ServerState) -> list[int]:
        """The M uploaded clients with the largest affinity from the others, sum_{i != j}
        P[i, j] (ties: smaller id first): what a newcomer downloads."""
        affinity = state["affinity"]
        received = affinity.sum(dim=0) - affinity.diagonal()
        ranked = sorted(state["models"].clients(), key=lambda j: (-float(received[j]), j))
        return ranked[: self.params.peers]

    def newcomer_payload(self, state: ServerState) -> dict[str, Any]:
        ids = self.newcomer_peers(state)
        return {"peer_ids": ids, "peers": [state["models"].get(j)["params"] for j in ids]}

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        """Keep each upload for the others; P[i, n] += w_n (raw, as PFLlib)."""
        affinity = state["affinity"].clone()
        for client in sorted(individual):
            upload = individual[client]
            state["models"].put(client, {"params": upload["params"]})
            ids = upload["peer_ids"]
            if ids:
                affinity[client, ids] += upload["weights"].to(torch.float64)
        return {**state, "affinity": affinity}

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The M peer models, and the initial model on a client's first round."""
        return nbytes(payload) + (nbytes(broadcast["params"]) if state is None else 0)

    def personalized_params(
        self, state: ServerState, client_state: ClientState | None, client: ClientInfo
    ) -> torch.Tensor:
        """The client's own model (the initial one before its first round), before the next
        round's re-weighting, which needs its data; no peer models are read."""
        return state["params"] if client_state is None else client_state["params"]

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Weight the peers on the held-out split, mix, then train on the rest."""
        current = broadcast["params"] if state is None else state["params"]
        reference = current
        if state is not None and self.params.reference == "start":
            reference = state["start"]
        probe = client.probe
        if probe is not None:
            indices = probe.train_indices
        else:  # on the driver (personalized_params's default): no data, no re-weighting
            indices = self.federation.client_train_indices[client.client]
        train, val = split_validation(indices, self.params.val_ratio, client.client)
        ids, peers = payload.get("peer_ids", []), payload.get("peers", [])
        raw = torch.zeros(len(ids), dtype=torch.float64)
        model = current
        if ids and len(val) > 0 and probe is not None:
            old_loss = validation_loss(probe, reference, val)
            losses = [validation_loss(probe, theta, val) for theta in peers]
            distances = [float(torch.linalg.vector_norm(theta - reference)) for theta in peers]
            raw = fomo_weights(old_loss, losses, distances)
            model, _ = combine(current, peers, raw)
        return ClientPlan(
            train_params=model,
            train_indices=train,
            context={"peer_ids": list(ids), "weights": raw},
        )

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """FedFomo's update of the received models' mean on the newcomer's validation part."""
        peers = payload.get("peers", [])
        if not peers:  # nobody has uploaded yet
            return broadcast["params"].clone()
        start = torch.stack([theta.to(torch.float64) for theta in peers]).mean(dim=0)
        start = start.to(torch.float32)
        probe = client.probe
        if probe is None:
            raise ValueError("FedFomo's newcomer rule measures the models on its own data")
        _, val = split_validation(probe.train_indices, self.params.val_ratio, client.client)
        if len(val) == 0:
            return start
        old_loss = validation_loss(probe, start, val)
        losses = [validation_loss(probe, theta, val) for theta in peers]
        distances = [float(torch.linalg.vector_norm(theta - start)) for theta in peers]
        model, _ = combine(start, peers, fomo_weights(old_loss, losses, distances))
        return model

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Upload the trained model and the raw weights; keep both models it needs."""
        new_state = {"params": trained}
        if self.params.reference == "start":
            new_state["start"] = plan.train_params.clone()
        upload = {"params": trained, "peer_ids": plan.context["peer_ids"]}
        upload["weights"] = plan.context["weights"]
        return ClientUpdate(individual=upload, state=new_state)
