"""SP-CACW's per-target bookkeeping: one step's estimates, the objective, the alpha solve.

Everything here acts on one target ``k`` of the server state (``SPCACW.init_state``): the
weighted SGD step of its model, the EMA bias estimates b^ (M x P), the running M x M Gram
matrices A = sum B^_t B^_t^T and V = sum eta w_t S_t S_t^T (S the raw gradients, or their
innovations with ``variance_term=centred``), ``L_history=per_step``'s V_L = sum L_t eta w_t
S_t S_t^T, and the solve of alpha on the simplex. Per-step Gram matrices are float32 products
of column chunks of the float32 stacks, summed in float64 (``fedsim.gradient_tasks.gram``).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.spcacw import SPCACWParams
from fedsim.algorithms.simplex import projected_gradient_step, solve_leader
from fedsim.gradient_tasks import gram as task_gram

ServerState = dict[str, Any]


def beta_at(beta: Any, step: int) -> float:
    """beta_t: 1/t for ``1/t`` (t >= 1), else the constant."""
    return 1.0 / step if beta == "1/t" else float(beta)


def centred_update(
    mean: torch.Tensor, grads: torch.Tensor, rate: float, *, first: bool
) -> tuple[torch.Tensor, float]:
    """One step of the centred variance term: (r, 1 - rate) with r = g - m_{t-1}, the
    innovation of each peer's gradient against its running mean before this step; then
    m_t = m_{t-1} + rate r (in place on ``mean``). The step's term is (1 - rate) r r^T
    (Welford: with rate 1/t these add up to sum_t (g_t - gbar)(g_t - gbar)^T exactly).
    The first step sets m_1 = g_1 and adds nothing, whatever the rate."""
    if first:
        mean.copy_(grads)
        return grads, 0.0
    residual = grads - mean
    mean.add_(residual, alpha=rate)
    return residual, 1.0 - rate


def gram(stack: torch.Tensor) -> np.ndarray:
    """S S^T of an (M, P) float32 stack, as a task's gram (``fedsim.gradient_tasks.gram``)."""
    return task_gram(stack).numpy()


class TargetMoments:
    """Running per-coordinate mean and variance of the target's own gradients this round."""

    def __init__(self) -> None:
        self.count, self.total, self.squares = 0, None, None

    def add(self, grad: torch.Tensor) -> None:
        g = grad.double()
        self.total = g.clone() if self.total is None else self.total.add_(g)
        self.squares = g * g if self.squares is None else self.squares.add_(g * g)
        self.count += 1

    def variance_norm2(self) -> float:
        """||var(g^(0))||^2 (0 until two gradients are in)."""
        if self.count < 2:
            return 0.0
        mean = self.total / self.count
        variance = (self.squares / self.count - mean * mean).clamp_min(0.0)
        return float((variance * variance).sum())


def apply_step(
    params: SPCACWParams,
    state: ServerState,
    k: int,
    target: int,
    grads: torch.Tensor,
    eta: float,
    moments: TargetMoments,
    *,
    grads_gram: np.ndarray | None = None,
    scratch: torch.Tensor | None = None,
) -> None:
    """w -= eta alpha . g; then the bias EMA and the running Gram matrices of target ``k``.

    ``grads`` (M x P) is read only. ``grads_gram`` is G G^T if the caller has it (the
    worker's, from the gradient task); ``scratch`` an (M, P) buffer for b~ (else allocated).
    """
    alpha = torch.as_tensor(state["alpha"][k], dtype=torch.float32)
    state["models"][k] -= eta * (alpha @ grads)
    state["steps"][k] += 1
    t = int(state["steps"][k])
    rate = beta_at(params.beta, t)
    observed = torch.sub(grads, grads[target], out=scratch)  # b~ (zero for the target itself)
    bias = state["bias"][k].lerp_(observed, rate)  # b^ = (1 - rate) b^ + rate b~
    if params.variance_term == "centred":
        spread, weight = centred_update(state["grad_mean"][k], grads, rate, first=t == 1)
        grads_gram = None
    else:
        spread, weight = grads, 1.0
    if "g_max" in state:
        norm = float(torch.linalg.vector_norm(grads, dim=1).max())
        state["g_max"][k] = max(state["g_max"][k], norm)
    if t >= params.T_start:
        state["bias_gram"][k] += gram(bias)
        if weight:
            term = eta * weight * (gram(spread) if grads_gram is None else grads_gram)
            state["grad_gram"][k] += term
            if "variance_gram" in state:  # L_history=per_step: this step's L eta in the sum
                state["variance_gram"][k] += state["lipschitz"][k] * term
        state["terms"][k] += 1
    if params.reg:  # only the regularizer reads the target's gradient variance
        moments.add(grads[target])


def quadratic_and_linear(
    params: SPCACWParams, state: ServerState, k: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """(Q, c) of target k's objective c^T alpha + alpha^T Q alpha: Q = A + L V and c =
    None (``bias_term=quadratic``), or Q = L V and c = diag(A), the running sums of
    ||b^_t^(i)||^2 (``linear``: the Jensen bound of the bias term on the simplex). L V is
    the latest L times the whole sum (``L_history=current``) or sum_t L_t eta ... as the
    steps ran (``per_step``)."""
    variance = variance_matrix(state, k)
    if params.bias_term == "linear":
        return variance, np.diag(state["bias_gram"][k]).copy()
    return state["bias_gram"][k] + variance, None


def variance_matrix(state: ServerState, k: int) -> np.ndarray:
    """The objective's variance quadratic of target k, L included (see ``L_history``)."""
    if "variance_gram" in state:
        return state["variance_gram"][k]
    return state["lipschitz"][k] * state["grad_gram"][k]


def lipschitz_due(
    params: SPCACWParams, state: ServerState, round_idx: int, steps: list[int]
) -> list[int]:
    """The targets whose L is estimated this round: every ``lipschitz_every`` rounds (or
    while it has none), once this round's ``steps`` take the target to ``T_start``. Before,
    no term has entered its objective and nothing reads L."""
    due = round_idx % params.lipschitz_every == 0
    return [
        k
        for k, taken in enumerate(state["steps"])
        if (due or not math.isfinite(state["lipschitz"][k])) and taken + steps[k] >= params.T_start
    ]


def regularizer_weight(
    params: SPCACWParams, state: ServerState, k: int, moments: TargetMoments, eta: float
) -> float:
    """lambda_reg = gamma ||var(g^(0))||^2 (0 without ``reg``); ``gamma=paper``: gamma =
    1 / ((8 + 2 L eta) g_max^2), g_max the largest gradient norm the target has seen."""
    if not params.reg:
        return 0.0
    gamma = params.gamma
    if gamma == "paper":
        g_max, lipschitz = float(state["g_max"][k]), float(state["lipschitz"][k])
        if not g_max > 0 or not math.isfinite(lipschitz):
            return 0.0
        gamma = 1.0 / ((8.0 + 2.0 * lipschitz * eta) * g_max**2)
    return float(gamma) * moments.variance_norm2()


def solve(
    params: SPCACWParams, state: ServerState, k: int, moments: TargetMoments, eta: float
) -> float:
    """Re-solve target k's alpha; returns the solver's seconds."""
    began = time.perf_counter()
    q, linear = quadratic_and_linear(params, state, k)
    everything = q if linear is None else np.concatenate([q.ravel(), linear])
    if state["terms"][k] == 0 or not np.isfinite(everything).all() or not np.any(everything):
        return time.perf_counter() - began
    reg = regularizer_weight(params, state, k, moments, eta)
    alpha = state["alpha"][k]
    if params.solver == "ftal":
        state["alpha"][k] = solve_leader(q, reg, alpha, linear=linear)
    else:
        state["alpha"][k] = projected_gradient_step(q, reg, alpha, linear=linear)
    return time.perf_counter() - began
