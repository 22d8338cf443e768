"""FC (CFL): clusters split when client updates disagree

``algorithm.*`` keys of ``fedsim/algorithms/fc.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked


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


Params = FCParams
