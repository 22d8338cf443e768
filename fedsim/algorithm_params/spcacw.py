"""SP-CACW: a target weights its peers' gradients by estimated bias and variance

``algorithm.*`` keys of ``fedsim/algorithms/spcacw.py`` (torch-free: a config is checked
without importing the algorithm). Defaults from the seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked

SOLVERS = ("ftal", "pgd")
VARIANCE_TERMS = ("raw", "centred")
BIAS_TERMS = ("quadratic", "linear")
L_HISTORIES = ("current", "per_step")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def valid_targets(value: Any) -> bool:
    """A client id, a non-empty list of distinct ids, or ``all``."""
    if value == "all" and isinstance(value, str):
        return True
    if _is_int(value):
        return value >= 0
    if isinstance(value, list) and value:
        return all(_is_int(v) and v >= 0 for v in value) and len(set(value)) == len(value)
    return False


@dataclass
class SPCACWParams(AlgorithmParams):
    """``algorithm.*`` keys of SP-CACW (defaults from the seed)."""

    targets: Any = checked(  # target client(s): an id, a list of ids, or all (side by side)
        0, valid_targets, "a client id, a list of distinct client ids, or all"
    )
    steps_per_round: Any = checked(  # target steps a round: epoch (one pass) or an integer
        "epoch",
        lambda v: v == "epoch" or (_is_int(v) and v >= 1),
        "epoch or an integer >= 1",
    )
    beta: Any = checked(  # EMA rate of the bias estimates: 1/t (running mean) or a constant
        "1/t",
        lambda v: v == "1/t" or (_is_number(v) and math.isfinite(v) and 0 < v <= 1),
        "1/t or a number in (0, 1]",
    )
    solver: str = checked(  # ftal (follow the approximate leader) | pgd (projected gradient)
        "ftal", lambda v: v in SOLVERS, f"allowed: {', '.join(SOLVERS)}"
    )
    update_every: str = checked(  # re-solve alpha after each round's pass (epoch) or each step
        "epoch", lambda v: v in ("epoch", "step"), "allowed: epoch, step"
    )
    T_start: int = checked(  # first step whose terms enter the objective
        1, lambda v: v >= 1, "must be an integer >= 1"
    )
    init: str = checked(  # initial alpha: onehot on the target (Local) | uniform
        "onehot", lambda v: v in ("onehot", "uniform"), "allowed: onehot, uniform"
    )
    reg: bool = False  # add lambda_reg sum alpha^3 (the seed's "SP-CACW reg")
    gamma: Any = checked(  # lambda_reg = gamma ||var(g^(0))||^2; paper: 1/((8 + 2 L eta) g_max^2)
        1.0,
        lambda v: v == "paper" or (_is_number(v) and math.isfinite(v) and v >= 0),
        "a number >= 0, or paper (1 / ((8 + 2 L eta) g_max^2))",
    )
    L: float | None = checked(  # fixed smoothness constant; null: estimate it by HVPs
        None, lambda v: v is None or v > 0, "null (estimate) or > 0"
    )
    L_history: str = checked(  # current: latest L x the whole sum | per_step: L_t eta per step
        "current", lambda v: v in L_HISTORIES, f"allowed: {', '.join(L_HISTORIES)}"
    )
    lipschitz_every: int = checked(  # re-estimate L every N rounds (epochs)
        1, lambda v: v >= 1, "must be an integer >= 1"
    )
    lipschitz_iterations: int = checked(  # power-iteration steps (HVPs) per L estimate
        10, lambda v: v >= 1, "must be an integer >= 1"
    )
    lipschitz_samples: int = checked(  # target samples for the L estimate (0: all)
        128, lambda v: v >= 0, "must be >= 0 (0: all)"
    )
    participation: float = checked(  # p: a peer joins a step with probability p
        1.0, lambda v: 0 < v <= 1, "must be in (0, 1]"
    )
    lr: float | None = checked(  # the target's step size eta; null: client.lr
        None, lambda v: v is None or v > 0, "null (client.lr) or > 0"
    )
    variance_term: str = checked(  # raw: the seed's ||sum alpha g||^2 | centred: g - mean_i
        "raw", lambda v: v in VARIANCE_TERMS, f"allowed: {', '.join(VARIANCE_TERMS)}"
    )
    bias_term: str = checked(  # quadratic: seed's ||sum alpha b||^2 | linear: sum alpha ||b||^2
        "quadratic", lambda v: v in BIAS_TERMS, f"allowed: {', '.join(BIAS_TERMS)}"
    )


Params = SPCACWParams
