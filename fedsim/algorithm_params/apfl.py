"""APFL: a learned mixture of a personal and the global model

``algorithm.*`` keys of ``fedsim/algorithms/apfl.py`` (torch-free: a config is checked
without importing the algorithm). Defaults are PFLlib's (``system/main.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked

APFL_UPDATES = ("pfllib", "paper")


@dataclass
class APFLParams(AlgorithmParams):
    """``algorithm.*`` keys of APFL."""

    alpha: float = checked(  # initial mixing weight of the personal model (PFLlib -al)
        1.0, lambda v: 0 <= v <= 1, "must be in [0, 1]"
    )
    alpha_lr: float | None = checked(  # step size of alpha's updates (null: client.lr, PFLlib)
        None, lambda v: v is None or v > 0, "must be > 0 (null: client.lr)", schedulable=True
    )
    update: str = checked(  # pfllib: v on its own loss (PFLlib) | paper: v on the mixture's loss
        "pfllib", lambda v: v in APFL_UPDATES, f"allowed: {', '.join(APFL_UPDATES)}"
    )


Params = APFLParams
