"""FedDyn: a dynamic regularizer aligns local and global optima

``algorithm.*`` keys of ``fedsim/algorithms/feddyn.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.aggregation_weights import WeightingParams
from fedsim.checks import checked

PENALTIES = ("norm", "squared")


@dataclass
class FedDynParams(WeightingParams):
    """``algorithm.*`` keys of FedDyn: alpha, the penalty form and the weighting keys."""

    weighting: str = "uniform"
    alpha: float = checked(  # dynamic regularizer strength
        0.01, lambda v: v > 0, "must be > 0", schedulable=True
    )
    penalty: str = checked(  # norm (PFLlib) | squared (the FedDyn paper)
        "norm", lambda v: v in PENALTIES, "allowed: norm, squared"
    )


Params = FedDynParams
