"""Per-FedAvg: MAML-style FedAvg, one adaptation step before evaluation

``algorithm.*`` keys of ``fedsim/algorithms/perfedavg.py`` (torch-free: a config is checked
without importing the algorithm). Defaults are PFLlib's (``system/main.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked

PERFEDAVG_ORDERS = ("first", "hessian_free")


@dataclass
class PerFedAvgParams(AlgorithmParams):
    """``algorithm.*`` keys of Per-FedAvg."""

    alpha: float | None = checked(  # inner (personalization) step size (null: client.lr, PFLlib)
        None, lambda v: v is None or v > 0, "must be > 0 (null: client.lr)", schedulable=True
    )
    beta: float | None = checked(  # outer (meta) step size (null: client.lr, PFLlib)
        None, lambda v: v is None or v > 0, "must be > 0 (null: client.lr)", schedulable=True
    )
    order: str = checked(  # first: FO-MAML (PFLlib) | hessian_free: Hessian-vector correction
        "first", lambda v: v in PERFEDAVG_ORDERS, f"allowed: {', '.join(PERFEDAVG_ORDERS)}"
    )
    hf_delta: float = checked(  # hessian_free: finite-difference step of the Hessian product
        1e-3, lambda v: v > 0, "must be > 0", schedulable=True
    )


Params = PerFedAvgParams
