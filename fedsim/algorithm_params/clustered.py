"""Keys of the clustering baselines: IFCA, FC (CFL), FedDisco (torch-free)."""

from __future__ import annotations

import math
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


@dataclass
class FCParams(AlgorithmParams):
    """``algorithm.*`` keys of FC (CFL)."""

    eps1: float = checked(  # split only when the norm of a cluster's mean update is below this
        0.4, lambda v: math.isfinite(v) and v > 0, "must be a finite number > 0"
    )
    eps2: float = checked(  # ... and its largest client update norm is above this
        1.6, lambda v: math.isfinite(v) and v > 0, "must be a finite number > 0"
    )
    split_after: int = checked(  # no split before this round (0-based; CFL: after round 20)
        20, lambda v: isinstance(v, int) and v >= 0, "must be an integer >= 0"
    )


@dataclass
class FedDiscoParams(AlgorithmParams):
    """``algorithm.*`` keys of FedDisco."""

    disco_a: float = checked(  # a: how much the normalized discrepancy d_k lowers a weight
        0.5, lambda v: math.isfinite(v) and v >= 0, "must be a finite number >= 0"
    )
    disco_b: float = checked(  # b: offset added to every weight before the ReLU
        0.1, lambda v: math.isfinite(v), "must be a finite number"
    )
