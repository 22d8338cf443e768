"""IFCA: clients pick the cluster model with the lowest loss

``algorithm.*`` keys of ``fedsim/algorithms/ifca.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked

IFCA_WEIGHTINGS = ("samples", "uniform")


@dataclass
class IFCAParams(AlgorithmParams):
    """``algorithm.*`` keys of IFCA."""

    clusters: int = checked(  # K: cluster models (each client trains the best of them)
        4, lambda v: isinstance(v, int) and 1 <= v <= 127, "must be an integer in [1, 127]"
    )
    weighting: str = checked(  # samples (n_k) | uniform (the IFCA code's plain mean)
        "samples", lambda v: v in IFCA_WEIGHTINGS, f"allowed: {', '.join(IFCA_WEIGHTINGS)}"
    )


Params = IFCAParams
