"""Keys of the personalized algorithms: cwFedAvg, FedPer, FedAMP, FedFomo (torch-free)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked
from fedsim.errors import ConfigError

CLASS_WEIGHTS = ("estimated", "true")  # cwFedAvg: r_i from the head's row norms | the counts
TOP_BLOCKS = re.compile(r"top-([1-9][0-9]*)")  # cwFedAvg classwise_layers=top-L
FEDPER_WEIGHTINGS = ("n", "sqrt")
FEDFOMO_REFERENCES = ("start", "trained")


@dataclass
class CwFedAvgParams(AlgorithmParams):
    """``algorithm.*`` keys of cwFedAvg."""

    # estimated (head row norms) | true (class proportions). Typed Any because YAML and the
    # CLI read a bare `true` as a boolean; __post_init__ turns it back into "true".
    class_weights: Any = "estimated"
    classwise_layers: str = "output"  # output | all | top-L (the top L blocks)
    wdr_lambda: float = 10.0  # WDR strength; loss += 0.5 * lambda * ||p - p~||_2; 0 disables

    def __post_init__(self) -> None:
        if self.class_weights is True:
            self.class_weights = "true"
        if not isinstance(self.class_weights, str) or self.class_weights not in CLASS_WEIGHTS:
            raise ConfigError(
                "algorithm.class_weights", self.class_weights, "allowed: estimated, true"
            )
        if self.classwise_layers not in ("output", "all") and not TOP_BLOCKS.fullmatch(
            self.classwise_layers
        ):
            raise ConfigError(
                "algorithm.classwise_layers",
                self.classwise_layers,
                "allowed: output, all, top-L (L >= 1 top blocks, e.g. top-2)",
            )
        if not self.wdr_lambda >= 0:
            raise ConfigError("algorithm.wdr_lambda", self.wdr_lambda, "must be >= 0 (0: no WDR)")


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


@dataclass
class FedAMPParams(AlgorithmParams):
    """``algorithm.*`` keys of FedAMP (PFLlib's names; defaults: see the module docstring)."""

    lamda: float = checked(  # strength of the pull to u_i (PFLlib ``lamda``); 0: Local-only
        0.005, lambda v: v >= 0, "must be >= 0 (0: Local-only)"
    )
    alpha_k: float = checked(  # alpha_K: scale of the attention coefficients (PFLlib ``alphaK``)
        0.05, lambda v: v > 0, "must be > 0"
    )
    sigma: float = checked(  # width of the attention kernel exp(-d / sigma) / sigma
        1.0, lambda v: v > 0, "must be > 0"
    )


@dataclass
class FedFomoParams(AlgorithmParams):
    """``algorithm.*`` keys of FedFomo."""

    peers: int = 5  # M: models each client downloads (PFLlib ``M``)
    val_ratio: float = 0.2  # share of the training split held out for weighting
    reference: str = "start"  # old model: start (PFLlib) | trained (the paper)
    server_memory_gb: float | None = None  # server copies beyond it spill (None: 1/4 of RAM)

    def __post_init__(self) -> None:
        if self.peers < 1:
            raise ConfigError("algorithm.peers", self.peers, "must be >= 1")
        if not 0 < self.val_ratio < 1:
            raise ConfigError("algorithm.val_ratio", self.val_ratio, "must be in (0, 1)")
        if self.reference not in FEDFOMO_REFERENCES:
            raise ConfigError("algorithm.reference", self.reference, "allowed: start, trained")
        if self.server_memory_gb is not None and not self.server_memory_gb >= 0:
            raise ConfigError("algorithm.server_memory_gb", self.server_memory_gb, "must be >= 0")
