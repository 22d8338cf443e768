"""FedRep: shared body, personal head; head epochs, then body epochs

``algorithm.*`` keys of ``fedsim/algorithms/fedrep.py`` (torch-free: a config is checked
without importing the algorithm). Defaults are PFLlib's (``system/main.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams, is_count
from fedsim.checks import checked


@dataclass
class FedRepParams(AlgorithmParams):
    """``algorithm.*`` keys of FedRep."""

    head_epochs: int = checked(  # epochs of head-only training before the body's (PFLlib -pls)
        1, is_count, "must be an integer >= 0 (0: the head stays as received)", schedulable=True
    )


Params = FedRepParams
