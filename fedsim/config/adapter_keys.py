"""Adapter keys checked from the config alone, before any data or model is read: HetLoRA's
``min_rank``, ``client_ranks`` and ``client_tiers`` against ``model.args.rank`` and
``data.num_clients`` (the rank against the base model's layer sizes needs the model's
structure: ``fedsim.pretrained.check_lora_rank``, before the data is built)."""

from __future__ import annotations

from typing import Any

from fedsim.data.names import TOKENIZED_MODELS
from fedsim.errors import ConfigError
from lightning_modules.lora_args import check_lora_args

DEFAULT_RANK = 8  # causal_lm's and sequence_classifier's model.args.rank (a test checks both)


def _client_key(key: str, client: Any, value: Any, num_clients: int) -> None:
    """``client`` is a client id of this federation: an integer in 0..num_clients-1."""
    if isinstance(client, bool) or not isinstance(client, int) or not 0 <= client < num_clients:
        raise ConfigError(
            f"{key}.{client}", value, f"names no client: clients are named by id, 0.."
            f"{num_clients - 1} (data.num_clients={num_clients}; partition.json lists each "
            "id beside its name)",
        )  # fmt: skip


def check_adapter_keys(cfg: Any) -> None:
    """An adapted model's LoRA keys are allowed (from the config alone: no model is loaded);
    HetLoRA's ranks fit the model's rank and name clients that exist (ConfigError)."""
    if cfg.model.name in TOKENIZED_MODELS:
        check_lora_args(cfg.model.args or {})
    if cfg.algorithm.name != "hetlora":
        return
    p, n = cfg.algorithm.params, cfg.data.num_clients
    for client, rank in (p.client_ranks or {}).items():
        _client_key("algorithm.client_ranks", client, rank, n)
    for client, tier in (p.client_tiers or {}).items():
        _client_key("algorithm.client_tiers", client, tier, n)
    rank = (cfg.model.args or {}).get("rank", DEFAULT_RANK)
    lora = cfg.model.name in TOKENIZED_MODELS
    if not lora or isinstance(rank, bool) or not isinstance(rank, int):
        return  # another adapter model: its rank is checked when it is built
    if p.min_rank > rank:
        raise ConfigError(
            "algorithm.min_rank", p.min_rank, f"must be at most the model's rank, "
            f"model.args.rank={rank}: pruning never takes a client below it",
        )  # fmt: skip
    for client, value in (p.client_ranks or {}).items():
        if value > rank:
            raise ConfigError(
                f"algorithm.client_ranks.{client}", value,
                f"a client's rank is at most the model's, model.args.rank={rank}",
            )  # fmt: skip
