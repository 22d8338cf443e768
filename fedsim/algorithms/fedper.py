"""FedPer: federated base layers, personal top layers that never leave the client.

Arivazhagan et al. 2019 (seed 001); PFLlib ``servers/serverper.py``. Rules: docs/algorithms.md,
"FedPer". The model's named blocks (``FLModule.block_names``, bottom -> top) are split into a
base (every block below the top K) and K personal blocks; K = ``personal_layers`` (1: only the
output layer, as PFLlib). Clients train the whole model; only the base is uploaded, and the
server averages it with weights n_i / sum n (``weighting: n``) or sqrt(n_i) / sum sqrt(n)
(``sqrt``, the seed's choice for imbalanced clients). The personal part is the client's
private state (in the driver's client state store, spilled to disk beyond its budget), so it
survives any number of rounds in which the client is not sampled.

Seed options:
- ``finetune_epochs`` E > 0: when a client receives a new base, it first trains its personal
  layers for E epochs with the base frozen (the seed's "fine-tune between rounds"); that
  adapted model is what it is evaluated with and trains from.
- ``cold_start_rounds`` R: rounds 0..R-1 are plain FedAvg on the full model (same weighting);
  from round R on a client starts its personal layers from the global model it then receives.
- Per-client K: ``client_personal_layers`` ({client: K}) or a device-capability tier
  (``client_tiers`` {client: tier}, ``tier_personal_layers`` {tier: K}, by default the seed's
  high 3 / mid 2 / low 1). A parameter is averaged over the clients whose base holds it; one
  that is personal for every client of a round keeps its server value.

A client that has no personal layers yet (never trained under FedPer) takes them from the
server's model: the initial model's (PFLlib: every client starts from a copy of it), or the
cold-start FedAvg model, or the average of clients for whom those blocks are base.

A held-out client (``eval.holdout_clients``) starts the same way, with K = ``personal_layers``
(it has no tier): the server's model, whose top K blocks it trains for
``eval.finetune_epochs`` epochs on its own train split with the base frozen (the seed's
fine-tune, on a newcomer). In cold-start rounds it is served the FedAvg model as it is, as
every client then. The server's model is no global model: its personal blocks never train
after the cold start.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from fedsim.algorithm_params.fedper import FedPerParams
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
from fedsim.algorithms.shared_part import finetuned
from fedsim.errors import ConfigError
from fedsim.sizes import nbytes
from fedsim.streams import FEDPER_FINETUNE_KEY
from lightning_modules.flat_params import flat_ranges, gather, scatter


@register
class FedPer(Algorithm):
    """Base layers averaged on the server; the top K blocks stay on each client."""

    name = "fedper"
    Params = FedPerParams
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the global base with the server's top personal_layers blocks fine-tuned for "
        "eval.finetune_epochs epochs on its own train split, base frozen (cold-start "
        "rounds: the FedAvg model as it is)",
        source="fedsim's choice: the seed's fine-tune of the personal layers on a new base, "
        "from the server's personal layers, as a client's first round",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = False  # the personal blocks never train on the server

    def __init__(self, params: FedPerParams, federation: FederationInfo):
        super().__init__(params, federation)
        self._check_clients()
        blocks = federation.block_names
        self.client_k = [self._k_of(c, len(blocks)) for c in range(federation.num_clients)]
        names = [e.name for e in federation.layout.entries]  # outside every block: base
        self.base_names: dict[int, list[str]] = {}
        self.base_ranges: dict[int, list[tuple[int, int]]] = {}
        self.personal_ranges: dict[int, list[tuple[int, int]]] = {}
        for k in sorted(set(self.client_k)):
            top = blocks[len(blocks) - k :] if k else []
            personal = {n for b in top for n in federation.block_parameters[b]}
            base = [n for n in names if n not in personal]
            self.base_names[k] = base
            self.base_ranges[k] = flat_ranges(federation.layout, base)
            self.personal_ranges[k] = flat_ranges(federation.layout, sorted(personal))

    def _k_of(self, client: int, num_blocks: int) -> int:
        p = self.params
        key, k = "algorithm.personal_layers", p.personal_layers
        if p.client_tiers is not None and client in p.client_tiers:
            key = f"algorithm.client_tiers.{client}"
            k = p.tier_personal_layers[p.client_tiers[client]]
        if p.client_personal_layers is not None and client in p.client_personal_layers:
            key, k = f"algorithm.client_personal_layers.{client}", p.client_personal_layers[client]
        if k > num_blocks:
            raise ConfigError(
                key, k, f"the model has {num_blocks} blocks: K must be in 0..{num_blocks}"
            )
        return k

    def _check_clients(self) -> None:
        n = self.federation.num_clients
        for key, mapping in (
            ("algorithm.client_personal_layers", self.params.client_personal_layers),
            ("algorithm.client_tiers", self.params.client_tiers),
        ):
            for client in mapping or {}:
                if not isinstance(client, int) or not 0 <= client < n:
                    raise ConfigError(f"{key}.{client}", client, f"client ids are 0..{n - 1}")

    def weight(self, num_train: int) -> float:
        """The client's aggregation weight before normalization: n_i or sqrt(n_i)."""
        return math.sqrt(num_train) if self.params.weighting == "sqrt" else float(num_train)

    def cold(self, round_idx: int) -> bool:
        """Whether ``round_idx`` is a cold-start (full-model FedAvg) round."""
        return round_idx < self.params.cold_start_rounds

    # --- driver side ---
    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        """Each entry: weighted mean over the clients whose upload holds it; else unchanged."""
        params = state["params"]
        if self.cold(context.round):
            total = sums.get("params")
            if total is None or total.weight <= 0:
                return state
            return {**state, "params": total.mean()}
        numerator = torch.zeros(params.numel(), dtype=torch.float64)
        denominator = torch.zeros(params.numel(), dtype=torch.float64)
        for k, ranges in self.base_ranges.items():
            total = sums.get(f"base_k{k}")
            if total is None or total.weight <= 0 or total.value is None:
                continue
            offset = 0
            for a, b in ranges:
                numerator[a:b] += total.value[offset : offset + b - a]
                denominator[a:b] += total.weight
                offset += b - a
        held = denominator > 0
        if not bool(held.any()):
            return state
        new = params.clone()
        new[held] = (numerator[held] / denominator[held]).to(params.dtype)
        return {**state, "params": new}

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Global base + own personal layers (+ the optional fine-tune with the base frozen)."""
        server = broadcast["params"]
        if self.cold(client.round):
            return ClientPlan(train_params=server)
        k = self.client_k[client.client]
        model = server.clone()
        if state is not None:
            scatter(model, self.personal_ranges[k], state["personal"])
        epochs = self.params.finetune_epochs
        if epochs > 0 and k > 0 and client.probe is not None:
            tuned, loss = client.probe.train(
                model, epochs=epochs, frozen=self.base_names[k], key=FEDPER_FINETUNE_KEY
            )
            if math.isfinite(loss):
                model = tuned
        return ClientPlan(train_params=model)

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The server's model, its top ``personal_layers`` blocks fine-tuned (base frozen)."""
        server = broadcast["params"]
        # personal_layers beyond the model's blocks (valid while every client has its own K):
        # every block
        k = min(self.params.personal_layers, len(self.federation.block_names))
        if self.cold(client.round) or k == 0:
            return server
        top = self.federation.block_names[-k:]
        personal = {n for b in top for n in self.federation.block_parameters[b]}
        base = [e.name for e in self.federation.layout.entries if e.name not in personal]
        return finetuned(server, client, finetune_epochs, base)

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Upload the base only; keep the personal layers as private state."""
        weight = self.weight(client.num_train)
        if self.cold(client.round):
            return ClientUpdate(sums={"params": (weight, trained)})
        k = self.client_k[client.client]
        sums: dict[str, tuple[float, torch.Tensor]] = {}
        if self.base_ranges[k]:
            sums[f"base_k{k}"] = (weight, gather(trained, self.base_ranges[k]))
        return ClientUpdate(sums=sums, state={"personal": gather(trained, self.personal_ranges[k])})

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The base layers to a client that holds its personal layers; the whole model to one
        without them yet (its first round after the cold start, and every cold-start round)."""
        if state is None:
            return super().download_nbytes(broadcast, payload, state)
        params = broadcast["params"]
        base = params.numel() - state["personal"].numel()
        return base * params.element_size() + nbytes(payload)

    def model_upload(self, client: ClientInfo) -> ModelUpload:
        """The base layers only (the whole model in cold-start rounds)."""
        if self.cold(client.round):
            return ModelUpload(sums=("params",))
        return ModelUpload(ranges=self.base_ranges[self.client_k[client.client]], sums=("base_k*",))
