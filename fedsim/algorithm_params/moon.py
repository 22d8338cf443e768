"""MOON: FedAvg with a model-contrastive loss (global vs previous model)

``algorithm.*`` keys of ``fedsim/algorithms/moon.py`` (torch-free: a config is checked
without importing the algorithm). The paper's defaults (PFLlib's are mu 0, tau 1:
docs/algorithms.md says why).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked


@dataclass
class MOONParams(AlgorithmParams):
    """``algorithm.*`` keys of MOON (the paper's defaults; PFLlib's are mu 0, tau 1)."""

    mu: float = checked(  # weight of the model-contrastive loss (0: FedAvg)
        1.0, lambda v: v >= 0, "must be >= 0 (0: FedAvg)", schedulable=True
    )
    tau: float = checked(  # temperature of the contrast
        0.5, lambda v: v > 0, "must be > 0", schedulable=True
    )


Params = MOONParams
