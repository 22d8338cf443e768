"""FedPer: shared base, personal top layers

``algorithm.*`` keys of ``fedsim/algorithms/fedper.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.errors import ConfigError

FEDPER_WEIGHTINGS = ("n", "sqrt")


def _check_k_map(key: str, mapping: Any, value_ok: str) -> dict[Any, int]:
    if not isinstance(mapping, dict):
        raise ConfigError(key, mapping, f"must be a mapping {value_ok}")
    for k, v in mapping.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{key}.{k}", v, "must be an integer >= 0 (blocks kept personal)")
    return mapping


@dataclass
class FedPerParams(AlgorithmParams):
    """``algorithm.*`` keys of FedPer."""

    personal_layers: int = 1  # K: top blocks kept on the client (1: the output layer)
    weighting: str = "n"  # n: n_i / sum n | sqrt: sqrt(n_i) / sum sqrt(n)
    finetune_epochs: int = 0  # E: personal layers trained with the base frozen (0: off)
    cold_start_rounds: int = 0  # R: full-model FedAvg rounds before the split
    client_personal_layers: dict | None = None  # {client: K}, overrides tiers and the default
    client_tiers: dict | None = None  # {client: tier}, K from tier_personal_layers
    tier_personal_layers: dict = field(  # {tier: K}, the K of each tier in client_tiers
        default_factory=lambda: {"high": 3, "mid": 2, "low": 1}
    )

    def __post_init__(self) -> None:
        if isinstance(self.personal_layers, bool) or self.personal_layers < 0:
            raise ConfigError(
                "algorithm.personal_layers", self.personal_layers, "must be an integer >= 0"
            )
        if self.weighting not in FEDPER_WEIGHTINGS:
            raise ConfigError("algorithm.weighting", self.weighting, "allowed: n, sqrt")
        if self.finetune_epochs < 0:
            raise ConfigError("algorithm.finetune_epochs", self.finetune_epochs, "must be >= 0")
        if self.cold_start_rounds < 0:
            raise ConfigError("algorithm.cold_start_rounds", self.cold_start_rounds, "must be >= 0")
        _check_k_map("algorithm.tier_personal_layers", self.tier_personal_layers, "tier: K")
        if self.client_personal_layers is not None:
            _check_k_map("algorithm.client_personal_layers", self.client_personal_layers, "id: K")
        if self.client_tiers is not None:
            if not isinstance(self.client_tiers, dict):
                raise ConfigError("algorithm.client_tiers", self.client_tiers, "must be a mapping")
            for client, tier in self.client_tiers.items():
                if tier not in self.tier_personal_layers:
                    allowed = ", ".join(map(str, self.tier_personal_layers))
                    raise ConfigError(
                        f"algorithm.client_tiers.{client}", tier, f"allowed tiers: {allowed}"
                    )


Params = FedPerParams
