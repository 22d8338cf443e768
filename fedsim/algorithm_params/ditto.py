"""Ditto: a personal model pulled towards the global FedAvg model

``algorithm.*`` keys of ``fedsim/algorithms/ditto.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.fedavg import FedAvgParams
from fedsim.checks import checked


@dataclass
class DittoParams(FedAvgParams):
    """``algorithm.*`` keys of Ditto (and FedAvg's, for the global model)."""

    mu: float = checked(  # pull of the personal model towards the global model (Ditto's lambda)
        0.1, lambda v: v >= 0, "must be >= 0", schedulable=True
    )
    personal_epochs: int = checked(  # epochs of personal training per round (PFLlib plocal_epochs)
        1, lambda v: v >= 1, "must be >= 1", schedulable=True
    )


Params = DittoParams
