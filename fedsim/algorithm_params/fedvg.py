"""FedVG: FedAvg weighted by inverse validation-gradient norms

``algorithm.*`` keys of ``fedsim/algorithms/fedvg.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.fedavg import FedAvgParams


@dataclass
class FedVGParams(FedAvgParams):
    """``algorithm.*`` keys of FedVG: the FedAvg keys, FedVG weights by default."""

    weighting: str = "fedvg"


Params = FedVGParams
