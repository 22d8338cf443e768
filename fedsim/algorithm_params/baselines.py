"""Keys of the personalization baselines: FedRep, LG-FedAvg, FedBABU, APFL, pFedMe,
Per-FedAvg, MOON (torch-free). FedBN, FedRoD and FedNova have no keys of their own.

Defaults are PFLlib's (``system/main.py``), except where PFLlib's default is a known bug and
the paper's value is used instead (pFedMe's ``beta``, MOON's ``mu`` and ``tau``):
docs/algorithms.md says which, per algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked

APFL_UPDATES = ("pfllib", "paper")
PFEDME_EVALUATES = ("personal", "global")
PERFEDAVG_ORDERS = ("first", "hessian_free")


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _positive_count(v: object) -> bool:
    return _count(v) and v >= 1  # type: ignore[operator]


@dataclass
class FedRepParams(AlgorithmParams):
    """``algorithm.*`` keys of FedRep."""

    head_epochs: int = checked(  # epochs of head-only training before the body's (PFLlib -pls)
        1, _count, "must be an integer >= 0 (0: the head stays as received)"
    )


@dataclass
class LGFedAvgParams(AlgorithmParams):
    """``algorithm.*`` keys of LG-FedAvg."""

    global_layers: int = checked(  # top named blocks that are shared (1: the output layer)
        1, _positive_count, "must be an integer >= 1"
    )


@dataclass
class FedBABUParams(AlgorithmParams):
    """``algorithm.*`` keys of FedBABU."""

    finetune_epochs: int = checked(  # epochs of whole-model fine-tuning before each evaluation
        10, _count, "must be an integer >= 0 (0: evaluate the body with the fixed random head)"
    )


@dataclass
class APFLParams(AlgorithmParams):
    """``algorithm.*`` keys of APFL."""

    alpha: float = checked(  # initial mixing weight of the personal model (PFLlib -al)
        1.0, lambda v: 0 <= v <= 1, "must be in [0, 1]"
    )
    alpha_lr: float | None = checked(  # step size of alpha's updates (null: client.lr, PFLlib)
        None, lambda v: v is None or v > 0, "must be > 0 (null: client.lr)"
    )
    update: str = checked(  # pfllib: v on its own loss (PFLlib) | paper: v on the mixture's loss
        "pfllib", lambda v: v in APFL_UPDATES, f"allowed: {', '.join(APFL_UPDATES)}"
    )


@dataclass
class PFedMeParams(AlgorithmParams):
    """``algorithm.*`` keys of pFedMe (PFLlib's names and defaults; ``beta``: the paper's)."""

    lamda: float = checked(  # lambda: pull of the personal model to the local model (PFLlib -lam)
        1.0, lambda v: v > 0, "must be > 0"
    )
    personal_lr: float = checked(  # step size of the K inner steps (PFLlib -lrp)
        0.01, lambda v: v > 0, "must be > 0"
    )
    K: int = checked(5, _positive_count, "must be an integer >= 1")  # inner steps per batch
    beta: float = checked(  # server: w <- (1 - beta) w + beta mean (PFLlib's default 0: a bug)
        1.0, lambda v: v > 0, "must be > 0 (1: the plain mean)"
    )
    mu: float = checked(  # L2 term of the inner steps (hard-coded 0.001 in PFLlib)
        0.001, lambda v: v >= 0, "must be >= 0"
    )
    evaluate: str = checked(  # personal: its personal model | global: PFLlib's effective one
        "personal", lambda v: v in PFEDME_EVALUATES, f"allowed: {', '.join(PFEDME_EVALUATES)}"
    )


@dataclass
class PerFedAvgParams(AlgorithmParams):
    """``algorithm.*`` keys of Per-FedAvg."""

    alpha: float | None = checked(  # inner (personalization) step size (null: client.lr, PFLlib)
        None, lambda v: v is None or v > 0, "must be > 0 (null: client.lr)"
    )
    beta: float | None = checked(  # outer (meta) step size (null: client.lr, PFLlib)
        None, lambda v: v is None or v > 0, "must be > 0 (null: client.lr)"
    )
    order: str = checked(  # first: FO-MAML (PFLlib) | hessian_free: Hessian-vector correction
        "first", lambda v: v in PERFEDAVG_ORDERS, f"allowed: {', '.join(PERFEDAVG_ORDERS)}"
    )
    hf_delta: float = checked(  # hessian_free: finite-difference step of the Hessian product
        1e-3, lambda v: v > 0, "must be > 0"
    )


@dataclass
class MOONParams(AlgorithmParams):
    """``algorithm.*`` keys of MOON (the paper's defaults; PFLlib's are mu 0, tau 1)."""

    mu: float = checked(  # weight of the model-contrastive loss (0: FedAvg)
        1.0, lambda v: v >= 0, "must be >= 0 (0: FedAvg)"
    )
    tau: float = checked(0.5, lambda v: v > 0, "must be > 0")  # temperature of the contrast
