"""HetLoRA: every client trains the global LoRA adapter truncated to its own rank; the server
zero-pads the uploads to the largest rank and averages them weighted by their norms; a client
whose least important ranks shrank under a penalty prunes them.

Cho et al., "Heterogeneous LoRA for Federated Fine-tuning of On-Device Foundation Models",
EMNLP 2024. Rules: docs/algorithms.md, "hetlora". The model is built at the largest rank
``r_max`` (``model.args.rank``); a client of rank ``r`` uses the first ``r`` rows of each A
(r_max x in) and the first ``r`` columns of each B (out x r_max), the rest zero:
1. it receives the server's adapter truncated to ``r`` (the rest zeroed) and trains it, with
   ``prune_lambda * sum_modules |A[t:r]| |B[:, t:r]|`` added to its loss, t = floor(gamma r);
2. the trained entries beyond ``r`` are zeroed again (zero entries get zero gradients from
   the loss and the penalty, and stay zero under SGD or Adam; the zeroing makes sure), and it
   uploads its first ``r`` ranks with weight ``s_k = sum_modules |B_k A_k|_F`` (``sparsity``)
   or ``n_k``;
3. with ``self_pruning``, if that tail norm product is smaller after training than in the
   model it received, its rank becomes ``max(min_rank, floor(gamma r))`` from the next round.
The server: ``W = sum_k s_k pad(W_k) / sum_k s_k``, each upload zero-padded to r_max (A and B
each, not their product). A client is evaluated with the server's adapter at its own rank.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedsim.algorithm_params.hetlora import HetLoRAParams
from fedsim.algorithms.base import (
    Algorithm,
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
from fedsim.algorithms.lora_parts import require_lora
from fedsim.algorithms.registry import register
from fedsim.errors import ConfigError
from lightning_modules.hooks import ClientTerms


class TailPenalty(ClientTerms):
    """``lam * sum_modules |A[t:r]| |B[:, t:r]|``: rank self-pruning's penalty on the tail."""

    def __init__(self, pairs: list[tuple[str, str]], tail: int, rank: int, lam: float):
        self.pairs, self.tail, self.rank, self.lam = pairs, tail, rank, lam

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.lam * tail_norm(params, self.pairs, self.tail, self.rank)


def tail_norm(
    params: dict[str, torch.Tensor], pairs: list[tuple[str, str]], tail: int, rank: int
) -> torch.Tensor:
    """sum over modules of |A[tail:rank]|_F |B[:, tail:rank]|_F."""
    return sum(torch.linalg.vector_norm(params[a][tail:rank]) *
               torch.linalg.vector_norm(params[b][:, tail:rank]) for a, b in pairs)  # fmt: skip


@register
class HetLoRA(Algorithm):
    """A LoRA rank per client; zero-padded, norm-weighted aggregation; rank self-pruning."""

    name = "hetlora"
    Params = HetLoRAParams
    newcomer = NewcomerRule(
        rule="the global adapter at the largest rank (model.args.rank), as the server keeps it",
        source="fedsim's choice: the paper serves members only; a device of unknown capacity "
        "is given what a client without a configured rank gets, the whole global adapter",
    )

    def __init__(self, params: HetLoRAParams, federation: FederationInfo):
        super().__init__(params, federation)
        layout = federation.layout
        self.pairs = [(m.a, m.b) for m in require_lora(layout, "hetlora")]  # (A, B) per module
        self.max_rank = layout.by_name[self.pairs[0][0]].shape[0]
        self.client_rank = [self._rank_of(c) for c in range(federation.num_clients)]
        self.indices: dict[int, torch.Tensor] = {}  # rank -> its entries of the flat vector

    def __getstate__(self) -> dict[str, Any]:
        """Without the index cache: a checkpoint or a worker gets the rules, not megabytes of
        indices it rebuilds on first use."""
        return {**self.__dict__, "indices": {}}

    def _rank_of(self, client: int) -> int:
        p, key, rank = self.params, "model.args.rank", self.max_rank
        if p.client_tiers is not None and client in p.client_tiers:
            key, rank = f"algorithm.client_tiers.{client}", p.tier_ranks[p.client_tiers[client]]
        if p.client_ranks is not None and client in p.client_ranks:
            key, rank = f"algorithm.client_ranks.{client}", p.client_ranks[client]
        if rank > self.max_rank:
            raise ConfigError(key, rank, f"a client's rank is at most the model's, "
                              f"model.args.rank={self.max_rank}")  # fmt: skip
        return rank

    def rank_index(self, rank: int) -> torch.Tensor:
        """The flat vector's entries a rank-``rank`` client holds (sorted): A's first rows, B's
        first columns, and every entry that is no LoRA matrix."""
        if rank not in self.indices:
            layout = self.federation.layout
            mask = torch.ones(layout.total, dtype=torch.bool)
            for a, b in self.pairs:
                layout.view(mask, a)[rank:] = False
                layout.view(mask, b)[:, rank:] = False
            self.indices[rank] = mask.nonzero().squeeze(1)
        return self.indices[rank]

    def truncated(self, params: torch.Tensor, rank: int) -> torch.Tensor:
        """``params`` (a new tensor) with the entries beyond ``rank`` zeroed."""
        index = self.rank_index(rank)
        out = torch.zeros_like(params)
        out[index] = params[index]
        return out

    def rank_now(self, client: int, state: ClientState | None) -> int:
        """The client's rank this round: its configured one, or what it pruned it to."""
        return self.client_rank[client] if state is None else int(state["rank"])

    def unflatten(self, params: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.federation.layout.unflatten(params)

    def sparsity(self, params: torch.Tensor) -> float:
        """sum over modules of |B A|_F: the paper's aggregation weight (before normalizing)."""
        views = self.unflatten(params)
        return float(sum(torch.linalg.matrix_norm(views[b] @ views[a]) for a, b in self.pairs))

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """The server's adapter at the client's rank; the tail penalty while it trains."""
        rank = self.rank_now(client.client, state)
        plan = ClientPlan(train_params=self.truncated(broadcast["params"], rank))
        tail = math.floor(self.params.prune_gamma * rank)
        if self.params.self_pruning and self.params.prune_lambda > 0 and tail < rank:
            plan.terms = TailPenalty(self.pairs, tail, rank, self.params.prune_lambda)
        plan.context["rank"] = rank
        return plan

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Upload the first ``rank`` ranks (weight |B A|_F or n); prune if the tail shrank."""
        rank = plan.context["rank"]
        trained = self.truncated(trained, rank)
        p = self.params
        weight = self.sparsity(trained) if p.aggregation == "sparsity" else float(client.num_train)
        new_rank = rank
        tail = math.floor(p.prune_gamma * rank)
        if p.self_pruning and rank > p.min_rank:
            before = tail_norm(self.unflatten(plan.train_params), self.pairs, tail, rank)
            after = tail_norm(self.unflatten(trained), self.pairs, tail, rank)
            if float(after) < float(before):
                new_rank = max(p.min_rank, tail)
        return ClientUpdate(
            sums={f"rank{rank}": (weight, trained[self.rank_index(rank)])},
            state={"rank": new_rank},
        )

    # --- driver side ---
    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        """Zero-padded weighted mean: every upload counts (with zeros) in every entry."""
        params = state["params"]
        numerator = torch.zeros(params.numel(), dtype=torch.float64)
        total = 0.0
        for key, part in sums.items():
            if key.startswith("rank") and part.value is not None:
                numerator[self.rank_index(int(key[4:]))] += part.value
                total += part.weight
        if total <= 0:
            return state  # nobody finished (or every upload was zero): keep the model
        return {**state, "params": (numerator / total).to(params.dtype)}

    # --- bytes: each client's rank, both ways ---
    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The server's adapter truncated to the client's rank (its state's, else configured:
        the store gives no client id here, so a client without state is read from the
        payload)."""
        rank = int(state["rank"]) if state is not None else int(payload["rank"])
        params = broadcast["params"]
        return int(self.rank_index(rank).numel()) * params.element_size()

    def client_payload(self, state: ServerState, client: int) -> dict[str, Any]:
        """The client's configured rank (a client that pruned reads its own from its state)."""
        return {"rank": self.client_rank[client]}

    def model_upload(self, client: ClientInfo) -> None:
        """None: a client's upload is its current rank's entries, which a pruned client
        shrinks; the deployment stages (privacy, compression, robust rules) are refused."""
        return None
