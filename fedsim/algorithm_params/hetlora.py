"""HetLoRA: LoRA at a rank per client, zero-padded sparsity-weighted aggregation, self-pruning

``algorithm.*`` keys of ``fedsim/algorithms/hetlora.py`` (torch-free: a config is checked
without importing the algorithm). The model's ``model.args.rank`` is the largest rank (the
server's); a client's rank is at most that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedsim.algorithm_params.base import AlgorithmParams, is_positive_count
from fedsim.checks import checked
from fedsim.errors import ConfigError

EXAMPLE = ("model.name=causal_lm",)  # an adapter model (every client at the model's rank)
# the adapter variant it needs (lightning_modules/adapters.py): one scale factor on every
# product, with which a rank-r client runs at alpha / r (algorithm.scaling)
ADAPTER = "scaled"
HETLORA_AGGREGATIONS = ("sparsity", "n")
HETLORA_WEIGHTS_PER = ("layer", "client")
HETLORA_SCALES = ("client_rank", "max_rank")


def _check_rank_map(key: str, mapping: Any) -> dict[Any, int]:
    if not isinstance(mapping, dict):
        raise ConfigError(key, mapping, "must be a mapping of LoRA ranks")
    for k, v in mapping.items():
        if not is_positive_count(v):
            raise ConfigError(f"{key}.{k}", v, "must be an integer >= 1 (a LoRA rank)")
    return mapping


@dataclass
class HetLoRAParams(AlgorithmParams):
    """``algorithm.*`` keys of HetLoRA."""

    client_ranks: dict | None = None  # {client: rank}, overrides tiers (others: the model's rank)
    client_tiers: dict | None = None  # {client: tier}, rank from tier_ranks
    tier_ranks: dict = field(  # {tier: rank}, the rank of each tier in client_tiers
        default_factory=lambda: {"high": 8, "mid": 4, "low": 2}
    )
    aggregation: str = "sparsity"  # sparsity: weights norm(B_k A_k) | n: n_k (zero-padded)
    self_pruning: bool = True  # a client whose tail ranks shrank in a round prunes them
    prune_lambda: float = checked(  # lambda of the tail penalty norm(A_tail) norm(B_tail)
        0.01, lambda v: v >= 0, "must be >= 0"
    )
    prune_gamma: float = checked(  # gamma: the tail is ranks floor(gamma r)..r; pruning keeps it
        0.99, lambda v: 0 < v < 1, "must be in (0, 1)"
    )
    min_rank: int = checked(1, is_positive_count, "must be an integer >= 1")  # pruning's floor
    # sparsity weights per adapted module, each module's A and B averaged with its own
    # |B_k A_k|_F (the reimplementation) | per client, the sum over modules weighting them all
    weights_per: str = checked(
        "layer", lambda v: v in HETLORA_WEIGHTS_PER, f"allowed: {', '.join(HETLORA_WEIGHTS_PER)}"
    )
    # a rank-r client's adapter scaled by alpha / r (client_rank, the reimplementation) or by
    # the model's alpha / r_max (max_rank: every rank the same scale)
    scaling: str = checked(
        "client_rank", lambda v: v in HETLORA_SCALES, f"allowed: {', '.join(HETLORA_SCALES)}"
    )

    def __post_init__(self) -> None:
        if self.aggregation not in HETLORA_AGGREGATIONS:
            raise ConfigError("algorithm.aggregation", self.aggregation, "allowed: sparsity, n")
        _check_rank_map("algorithm.tier_ranks", self.tier_ranks)
        if self.client_ranks is not None:
            _check_rank_map("algorithm.client_ranks", self.client_ranks)
        if self.client_tiers is not None:
            if not isinstance(self.client_tiers, dict):
                raise ConfigError("algorithm.client_tiers", self.client_tiers, "must be a mapping")
            for client, tier in self.client_tiers.items():
                if tier not in self.tier_ranks:
                    allowed = ", ".join(map(str, self.tier_ranks))
                    raise ConfigError(
                        f"algorithm.client_tiers.{client}", tier, f"allowed tiers: {allowed}"
                    )


Params = HetLoRAParams
