"""LG-FedAvg: local body, shared top layers (the mirror of FedPer)

``algorithm.*`` keys of ``fedsim/algorithms/lgfedavg.py`` (torch-free: a config is checked
without importing the algorithm). Defaults are PFLlib's (``system/main.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams, is_positive_count
from fedsim.checks import checked


@dataclass
class LGFedAvgParams(AlgorithmParams):
    """``algorithm.*`` keys of LG-FedAvg."""

    global_layers: int = checked(  # top named blocks that are shared (1: the output layer)
        1, is_positive_count, "must be an integer >= 1"
    )


Params = LGFedAvgParams
