"""FedAvgM: FedAvg with server momentum 0.9

``algorithm.*`` keys of ``fedsim/algorithms/fedavgm.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.fedavg import FedAvgParams


@dataclass
class FedAvgMParams(FedAvgParams):
    """``algorithm.*`` keys of FedAvgM: FedAvg's, with server momentum 0.9 by default."""

    server_momentum: float = 0.9


Params = FedAvgMParams
