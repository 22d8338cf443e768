"""FedDisco: weights from sample counts and label-distribution discrepancy

``algorithm.*`` keys of ``fedsim/algorithms/feddisco.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked


@dataclass
class FedDiscoParams(AlgorithmParams):
    """``algorithm.*`` keys of FedDisco."""

    disco_a: float = checked(  # a: how much the normalized discrepancy d_k lowers a weight
        0.5, lambda v: math.isfinite(v) and v >= 0, "must be a finite number >= 0", schedulable=True
    )
    disco_b: float = checked(  # b: offset added to every weight before the ReLU
        0.1, lambda v: math.isfinite(v), "must be a finite number", schedulable=True
    )


Params = FedDiscoParams
