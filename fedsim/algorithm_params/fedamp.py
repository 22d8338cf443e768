"""FedAMP: attentive message passing between similar clients

``algorithm.*`` keys of ``fedsim/algorithms/fedamp.py`` (torch-free: a config is checked
without importing the algorithm). PFLlib's key names and defaults (docs/algorithms.md,
"fedamp").
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked


@dataclass
class FedAMPParams(AlgorithmParams):
    """``algorithm.*`` keys of FedAMP (PFLlib's names; defaults: see the module docstring)."""

    lamda: float = checked(  # strength of the pull to u_i (PFLlib ``lamda``); 0: Local-only
        0.005, lambda v: v >= 0, "must be >= 0 (0: Local-only)", schedulable=True
    )
    alpha_k: float = checked(  # alpha_K: scale of the attention coefficients (PFLlib ``alphaK``)
        0.05, lambda v: v > 0, "must be > 0", schedulable=True
    )
    sigma: float = checked(  # width of the attention kernel exp(-d / sigma) / sigma
        1.0, lambda v: v > 0, "must be > 0", schedulable=True
    )


Params = FedAMPParams
