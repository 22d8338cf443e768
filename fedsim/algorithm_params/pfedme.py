"""pFedMe: Moreau-envelope personal models, K inner steps per batch

``algorithm.*`` keys of ``fedsim/algorithms/pfedme.py`` (torch-free: a config is checked
without importing the algorithm). Defaults are PFLlib's (``system/main.py``), except
``beta``: PFLlib's default 0 is a bug, so the paper's 1 is used.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams, is_positive_count
from fedsim.checks import checked

PFEDME_EVALUATES = ("personal", "global")


@dataclass
class PFedMeParams(AlgorithmParams):
    """``algorithm.*`` keys of pFedMe (PFLlib's names and defaults; ``beta``: the paper's)."""

    lamda: float = checked(  # lambda: pull of the personal model to the local model (PFLlib -lam)
        1.0, lambda v: v > 0, "must be > 0", schedulable=True
    )
    personal_lr: float = checked(  # step size of the K inner steps (PFLlib -lrp)
        0.01, lambda v: v > 0, "must be > 0", schedulable=True
    )
    K: int = checked(  # inner steps per batch
        5, is_positive_count, "must be an integer >= 1", schedulable=True
    )
    beta: float = checked(  # server: w <- (1 - beta) w + beta mean (PFLlib's default 0: a bug)
        1.0, lambda v: v > 0, "must be > 0 (1: the plain mean)", schedulable=True
    )
    mu: float = checked(  # L2 term of the inner steps (hard-coded 0.001 in PFLlib)
        0.001, lambda v: v >= 0, "must be >= 0", schedulable=True
    )
    evaluate: str = checked(  # personal: its personal model | global: PFLlib's effective one
        "personal", lambda v: v in PFEDME_EVALUATES, f"allowed: {', '.join(PFEDME_EVALUATES)}"
    )


Params = PFedMeParams
