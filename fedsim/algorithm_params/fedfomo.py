"""FedFomo: each client mixes the peers that help its validation loss

``algorithm.*`` keys of ``fedsim/algorithms/fedfomo.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.errors import ConfigError

FEDFOMO_REFERENCES = ("start", "trained")


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


Params = FedFomoParams
