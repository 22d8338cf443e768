"""FedAvg: the server takes the cohort's weighted mean (any server optimizer)

``algorithm.*`` keys of ``fedsim/algorithms/fedavg.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.aggregation_weights import WeightingParams
from fedsim.algorithm_params.server_optimizer import AdaptiveServerParams
from fedsim.checks import checked
from fedsim.errors import ConfigError


@dataclass
class FedAvgParams(AdaptiveServerParams, WeightingParams):
    """``algorithm.*`` keys of FedAvg: the aggregation weights and the server optimizer."""

    server_lr: float = checked(  # server step on the averaged client update (1: plain FedAvg)
        1.0, lambda v: v > 0, "must be > 0", schedulable=True
    )
    server_momentum: float = checked(  # server SGD momentum beta (FedAvgM; 0: none)
        0.0, lambda v: 0 <= v < 1, "must be in [0, 1)", schedulable=True
    )

    def __post_init__(self) -> None:
        WeightingParams.__post_init__(self)
        AdaptiveServerParams.__post_init__(self)
        if self.server_optimizer != "sgd" and self.server_momentum != 0:
            raise ConfigError(
                "algorithm.server_momentum",
                self.server_momentum,
                f"acts only with algorithm.server_optimizer=sgd, and this run has "
                f"algorithm.server_optimizer={self.server_optimizer!r} (beta1 is its momentum)",
            )


Params = FedAvgParams
