"""FedProx: FedAvg with a proximal pull (mu/2)||w - w_global||^2 on clients

``algorithm.*`` keys of ``fedsim/algorithms/fedprox.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import configured_name
from fedsim.algorithm_params.fedavg import FedAvgParams
from fedsim.checks import checked
from fedsim.errors import ConfigError


@dataclass
class FedProxParams(FedAvgParams):
    """``algorithm.*`` keys of FedProx: ``mu`` (required) and FedAvg's keys."""

    mu: float | None = checked(  # proximal strength: loss += (mu/2) ||w - w_global||^2; required
        None, lambda v: v is None or v >= 0, "must be >= 0 (0: plain FedAvg)", schedulable=True
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu is None:
            raise ConfigError(
                "algorithm.mu",
                None,
                f"required for {configured_name('fedprox')}: set algorithm.mu (0.01 is common)",
            )


Params = FedProxParams
# its smallest runnable example beside algorithm.name (mu has no default); every test and
# the docs generator read it (algorithm_params.example)
EXAMPLE = ("algorithm.mu=0.01",)
