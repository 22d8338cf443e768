"""HetLoRA: every client trains the global LoRA adapter truncated to its own rank; the server
zero-pads the uploads to the largest rank and averages them weighted by their norms; a client
whose least important ranks shrank under a penalty prunes them.

Cho et al., "Heterogeneous LoRA for Federated Fine-tuning of On-Device Foundation Models",
EMNLP 2024. Rules: docs/algorithms.md, "hetlora". The model is built at the largest rank
``r_max`` (``model.args.rank``); a client of rank ``r`` uses the first ``r`` rows of each A
(r_max x in) and the first ``r`` columns of each B (out x r_max), the rest zero:
1. it receives the server's adapter truncated to ``r`` (the rest zeroed), run at the scale
   alpha / r (``scaling: client_rank``, the reimplementation: the model's ``scaled`` variant
   factor r_max / r on peft's alpha / r_max) or alpha / r_max (``max_rank``), and trains it,
   with ``prune_lambda * sum_modules |A[t:r]| |B[:, t:r]|`` added to its loss, t = floor(gamma r);
2. the trained entries beyond ``r`` are zeroed again (zero entries get zero gradients from
   the loss and the penalty, and stay zero under SGD or Adam; the zeroing makes sure), and it
   uploads its first ``r`` ranks weighted by ``|B_kj A_kj|_F`` per module j (``sparsity`` with
   ``weights_per: layer``, the reimplementation), ``s_k = sum_j |B_kj A_kj|_F`` for all of
   them (``weights_per: client``) or ``n_k`` (``aggregation: n``);
3. with ``self_pruning``, if that tail norm product is smaller after training than in the
   model it received, its rank becomes ``max(min_rank, floor(gamma r))`` from the next round.
The server: ``W = sum_k s_k pad(W_k) / sum_k s_k`` (per module with per-layer weights), each
upload zero-padded to r_max (A and B each, not their product); the scale factor never
travels. A client is evaluated with the server's adapter at its own rank and scale.
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
        self.pairs = [(m.a, m.b) for m in require_lora(federation, "hetlora")]  # (A, B) per module
        self.max_rank = layout.by_name[self.pairs[0][0]].shape[0]
        self.scale = federation.adapters.scale  # the scaled variant's factor (never travels)
        if self.scale is None and params.scaling == "client_rank":
            raise ConfigError(
                "algorithm.scaling", params.scaling, "needs the model's scale factor (the "
                "scaled adapter variant HetLoRA declares), which this model lacks: use max_rank",
            )  # fmt: skip
        self.per_layer = params.aggregation == "sparsity" and params.weights_per == "layer"
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

    def rank_index(self, rank: int, part: int | str = "all") -> torch.Tensor:
        """The flat vector's entries a rank-``rank`` client holds (sorted): A's first rows, B's
        first columns, and every entry that is no LoRA matrix (but the scale factor); ``part``:
        module j's alone, or ``rest`` (what is no LoRA matrix)."""
        key = (rank, part)
        if key not in self.indices:
            layout = self.federation.layout
            mask = torch.ones(layout.total, dtype=torch.bool)
            if self.scale is not None:
                layout.view(mask, self.scale)[:] = False
            for j, (a, b) in enumerate(self.pairs):
                keep = part == j or part == "all"
                layout.view(mask, a)[rank if keep else 0:] = False
                layout.view(mask, b)[:, rank if keep else 0:] = False
            if isinstance(part, int):
                a, b = self.pairs[part]
                mask &= layout.mask([a, b])
            self.indices[key] = mask.nonzero().squeeze(1)
        return self.indices[key]

    def truncated(self, params: torch.Tensor, rank: int) -> torch.Tensor:
        """``params`` (a new tensor) with the entries beyond ``rank`` zeroed."""
        index = self.rank_index(rank)
        out = torch.zeros_like(params)
        out[index] = params[index]
        if self.scale is not None:  # alpha / r for a rank-r client, or the model's alpha / r_max
            layout = self.federation.layout
            client_rank = self.params.scaling == "client_rank"
            layout.view(out, self.scale).fill_(self.max_rank / rank if client_rank else 1.0)
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
        if not self.per_layer:
            sums = {f"rank{rank}": (weight, trained[self.rank_index(rank)])}
        else:  # each module's A and B weighted by its own |B A|_F, anything else by their sum
            views = self.unflatten(trained)
            sums = {f"rank{rank}/{j}": (float(torch.linalg.matrix_norm(views[b] @ views[a])),
                                        trained[self.rank_index(rank, j)])
                    for j, (a, b) in enumerate(self.pairs)}  # fmt: skip
            rest = self.rank_index(rank, "rest")
            if rest.numel():
                sums[f"rank{rank}/rest"] = (weight, trained[rest])
        return ClientUpdate(sums=sums, state={"rank": new_rank})

    # --- driver side ---
    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        """Zero-padded weighted mean: every upload counts (with zeros) in every entry of its
        group (the whole model, or with per-layer weights each module and the rest); a group
        nobody finished (or all zero) keeps the server's entries, and so does the scale."""
        params = state["params"]
        groups: dict[str, list[Any]] = {}  # group -> [numerator, total]
        for key, part in sums.items():
            if not key.startswith("rank") or part.value is None:
                continue
            rank, _, group = key[4:].partition("/")
            where = groups.setdefault(group or "all", [torch.zeros(params.numel(),
                                                                   dtype=torch.float64), 0.0])
            where[0][self.rank_index(int(rank), int(group) if group.isdigit() else group or
                                     "all")] += part.value  # fmt: skip
            where[1] += part.weight
        if not any(total > 0 for _, total in groups.values()):
            return state  # nobody finished (or every upload was zero): keep the model
        new = params.clone()
        for group, (numerator, total) in groups.items():
            if total <= 0:
                continue
            if group == "all":
                covered = torch.ones(params.numel(), dtype=torch.bool)
            else:
                part = int(group) if group.isdigit() else group
                covered = torch.zeros(params.numel(), dtype=torch.bool)
                covered[self.rank_index(self.max_rank, part)] = True
            new[covered] = (numerator[covered] / total).to(params.dtype)
        if self.scale is not None:
            layout = self.federation.layout
            layout.view(new, self.scale).copy_(layout.view(params, self.scale))
        return {**state, "params": new}

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
