"""Weights on the probability simplex: exact Euclidean projection and two solvers for

    F(alpha) = c^T alpha + alpha^T Q alpha + reg * sum_i alpha_i^3,   alpha >= 0, sum alpha = 1,

with Q symmetric positive semi-definite (SP-CACW's running bias + variance Gram matrices),
an optional linear term c (SP-CACW's ``bias_term=linear``; zero unless given) and reg >= 0
(its cubic regularizer; convex on the simplex). Pure numpy, float64.

- ``solve_leader``: the minimiser (FTAL: follow the leader of every loss revealed so far),
  by accelerated projected gradient (FISTA with adaptive restart) to a tolerance;
- ``projected_gradient_step``: one projected gradient step of size 1 / curvature bound
  (PGD: repeated on a fixed objective it converges to the same minimiser).

Projection sets coordinates exactly to 0, so a peer the solution excludes has weight 0.0.
"""

from __future__ import annotations

import numpy as np


def project_simplex(v: np.ndarray) -> np.ndarray:
    """Euclidean projection of ``v`` onto the simplex (sort and threshold, O(M log M))."""
    v = np.asarray(v, dtype=np.float64)
    u = np.sort(v)[::-1]
    cumulative = np.cumsum(u) - 1.0
    ranks = np.arange(1, len(v) + 1)
    support = u - cumulative / ranks > 0
    rho = ranks[support][-1]
    theta = cumulative[support][-1] / rho
    return np.maximum(v - theta, 0.0)


def objective(
    q: np.ndarray, reg: float, alpha: np.ndarray, linear: np.ndarray | None = None
) -> float:
    """F(alpha) = c^T alpha + alpha^T Q alpha + reg sum alpha^3 (c = ``linear``, else 0)."""
    value = float(alpha @ q @ alpha + reg * np.sum(alpha**3))
    return value if linear is None else value + float(linear @ alpha)


def gradient(
    q: np.ndarray, reg: float, alpha: np.ndarray, linear: np.ndarray | None = None
) -> np.ndarray:
    """grad F = c + 2 Q alpha + 3 reg alpha^2 (Q symmetric)."""
    grad = 2.0 * q @ alpha + 3.0 * reg * alpha**2
    return grad if linear is None else grad + linear


def curvature_bound(q: np.ndarray, reg: float) -> float:
    """An upper bound on the curvature of F on the simplex: 2 lambda_max(Q) + 6 reg."""
    top = float(np.linalg.eigvalsh((q + q.T) / 2)[-1]) if len(q) else 0.0
    return 2.0 * max(top, 0.0) + 6.0 * reg


def _normalized(
    q: np.ndarray, reg: float, linear: np.ndarray | None = None
) -> tuple[np.ndarray, float, np.ndarray | None]:
    """Q, reg and c divided by one scale (the largest of Q's mean diagonal, reg and max |c|):
    the same minimiser, numbers near 1."""
    q = (np.asarray(q, dtype=np.float64) + np.asarray(q, dtype=np.float64).T) / 2
    scale = max(float(np.trace(q)) / max(len(q), 1), reg, 1e-300)
    if linear is not None:
        linear = np.asarray(linear, dtype=np.float64)
        scale = max(scale, float(np.abs(linear).max(initial=0.0)))
        linear = linear / scale
    return q / scale, reg / scale, linear


def projected_gradient_step(
    q: np.ndarray, reg: float, alpha: np.ndarray, linear: np.ndarray | None = None
) -> np.ndarray:
    """alpha <- Proj(alpha - grad F(alpha) / curvature bound); unchanged if F is flat.

    With a linear term and no curvature (Q = 0, reg = 0) the step is 1 (on the scale of c)."""
    q, reg, linear = _normalized(q, reg, linear)
    bound = curvature_bound(q, reg)
    if bound <= 0:
        if linear is None or not np.any(linear):
            return np.asarray(alpha, dtype=np.float64).copy()
        bound = 1.0
    return project_simplex(alpha - gradient(q, reg, alpha, linear) / bound)


def polish(
    q: np.ndarray, x: np.ndarray, tol: float = 1e-12, linear: np.ndarray | None = None
) -> np.ndarray | None:
    """The exact minimiser of c^T alpha + alpha^T Q alpha (no regularizer) on the support of
    ``x``, if it satisfies the KKT conditions of the whole simplex; else None.

    On the support S: 2 Q_SS alpha_S + c_S = lambda 1, sum alpha_S = 1, alpha_S > 0; off it
    the gradient must be >= lambda (no coordinate outside S would lower F).
    """
    support = np.flatnonzero(x > 0)
    k = len(support)
    system = np.zeros((k + 1, k + 1))
    system[:k, :k] = 2 * q[np.ix_(support, support)]
    system[:k, k] = -1.0
    system[k, :k] = 1.0
    rhs = np.zeros(k + 1)
    rhs[k] = 1.0
    if linear is not None:
        rhs[:k] = -linear[support]
    try:
        solution = np.linalg.solve(system, rhs)
    except np.linalg.LinAlgError:
        return None
    if not np.all(np.isfinite(solution)) or solution[:k].min() <= 0:
        return None
    alpha = np.zeros_like(x)
    alpha[support] = solution[:k]
    multiplier = solution[k]
    if np.min(gradient(q, 0.0, alpha, linear)) < multiplier - tol * max(1.0, abs(multiplier)):
        return None
    return alpha


def solve_leader(
    q: np.ndarray,
    reg: float,
    start: np.ndarray,
    *,
    tol: float = 1e-10,
    max_iterations: int = 20000,
    polish_every: int = 25,
    linear: np.ndarray | None = None,
) -> np.ndarray:
    """The minimiser of F over the simplex (FISTA from ``start``, restarted when F rises).

    Without the regularizer, every ``polish_every`` iterations the current support is tried
    for the exact (KKT) solution, which ends the search once the support is right. With a
    linear term and no curvature, the minimiser puts all weight on the smallest c_i.
    """
    q, reg, linear = _normalized(q, reg, linear)
    bound = curvature_bound(q, reg)
    x = project_simplex(start)
    if bound <= 0:
        if linear is None or not np.any(linear):
            return x
        return np.eye(len(x))[int(np.argmin(linear))]
    step = 1.0 / bound
    y, momentum, value = x.copy(), 1.0, objective(q, reg, x, linear)
    for iteration in range(max_iterations):
        if reg == 0 and iteration % polish_every == polish_every - 1:
            exact = polish(q, x, linear=linear)
            if exact is not None and objective(q, reg, exact, linear) <= value + 1e-15:
                return exact
        new = project_simplex(y - step * gradient(q, reg, y, linear))
        new_value = objective(q, reg, new, linear)
        if new_value > value:  # adaptive restart: a plain projected step from x instead
            new = project_simplex(x - step * gradient(q, reg, x, linear))
            new_value = objective(q, reg, new, linear)
            momentum = 1.0
            y = new.copy()
        else:
            next_momentum = (1 + np.sqrt(1 + 4 * momentum**2)) / 2
            y = new + (momentum - 1) / next_momentum * (new - x)
            momentum = next_momentum
        moved = float(np.max(np.abs(new - x)))
        x, value = new, new_value
        if moved <= tol:
            break
    return x
