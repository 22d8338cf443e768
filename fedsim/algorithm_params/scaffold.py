"""SCAFFOLD: control variates correct the clients' drift

``algorithm.*`` keys of ``fedsim/algorithms/scaffold.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.aggregation_weights import WeightingParams
from fedsim.algorithm_params.server_optimizer import AdaptiveServerParams
from fedsim.checks import checked


@dataclass
class ScaffoldParams(AdaptiveServerParams, WeightingParams):
    """``algorithm.*`` keys of SCAFFOLD: the server step eta_g, the weighting keys and the
    server optimizer (its lr is ``global_lr``)."""

    weighting: str = "uniform"
    global_lr: float = checked(  # server step eta_g
        1.0, lambda v: v > 0, "must be > 0", schedulable=True
    )

    def __post_init__(self) -> None:
        WeightingParams.__post_init__(self)
        AdaptiveServerParams.__post_init__(self)


Params = ScaffoldParams
