"""Asynchronous rounds: staleness discounts (the clients' virtual clock is in ``clock.py``).

Staleness ``s`` >= 0 is how old an update's starting model is when it arrives: in server
model versions (FedAsync's t - tau) or in virtual time divided by the median round duration.
Every function takes floats, so either unit works; use one per run.

- FedAsync (Xie, Koyejo, Gupta 2019, "Asynchronous Federated Optimization"): on each arrival
  x <- (1 - alpha_t) x + alpha_t x_client with alpha_t = alpha * d(s), where d is
  ``constant`` 1, ``polynomial`` (1 + s)^-a, or ``hinge`` 1 if s <= b else 1 / (a (s - b) + 1).
- FedBuff (Nguyen et al. 2022, "Federated Learning with Buffered Asynchronous Aggregation"):
  every K arrivals, x <- x + eta_g * sum_i w_i delta_i with w_i = d(s_i) / K,
  d = (1 + s)^-1/2 (polynomial, a = 0.5).
- ``max_staleness`` (the FedPer seed: delayed more than 2 tau = stale): policy ``discount``
  keeps a stale update at its discounted weight (a ``hinge`` with no ``b`` takes
  b = max_staleness: full weight up to it, decaying after); ``drop`` gives it weight 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedsim.config.asynchronous import STALE_POLICIES

DISCOUNTS = ("constant", "polynomial", "hinge")


def discount(
    staleness: float | Sequence[float] | np.ndarray,
    kind: str = "polynomial",
    a: float = 0.5,
    b: float = 0.0,
) -> np.ndarray:
    """FedAsync's staleness function d(s) of every staleness given (float64 array)."""
    s = np.asarray(staleness, dtype=np.float64)
    if np.any(s < 0) or not np.all(np.isfinite(s)):
        raise ValueError(f"staleness={staleness!r}: must be finite and >= 0")
    if not a >= 0:
        raise ValueError(f"staleness exponent a={a!r}: must be >= 0")
    if kind == "constant":
        return np.ones_like(s)
    if kind == "polynomial":
        return (1.0 + s) ** -a
    if kind == "hinge":
        if not b >= 0:
            raise ValueError(f"hinge b={b!r}: must be >= 0")
        return np.where(s <= b, 1.0, 1.0 / (a * np.maximum(s - b, 0.0) + 1.0))
    raise ValueError(f"staleness function {kind!r}: allowed: {', '.join(DISCOUNTS)}")


def staleness_weights(
    staleness: float | Sequence[float] | np.ndarray,
    *,
    kind: str = "polynomial",
    a: float = 0.5,
    b: float | None = None,
    max_staleness: float | None = None,
    policy: str = "discount",
    stale: Sequence[bool] | np.ndarray | None = None,
) -> np.ndarray:
    """d(s) per update with ``max_staleness`` applied by ``policy`` (0 = dropped).

    ``stale`` (one flag per update) says which updates are stale when staleness is not
    measured in the unit of ``max_staleness`` (asynchronous runs: s in server versions, the
    stale rule on the client's delay in virtual time); it replaces ``s > max_staleness``.
    """
    if policy not in STALE_POLICIES:
        raise ValueError(f"stale update policy {policy!r}: allowed: {', '.join(STALE_POLICIES)}")
    if max_staleness is not None and not max_staleness >= 0:
        raise ValueError(f"async.max_staleness={max_staleness!r}: must be >= 0")
    if b is None:
        if kind == "hinge" and max_staleness is None:
            raise ValueError("hinge staleness needs b or max_staleness")
        b = max_staleness if kind == "hinge" else 0.0
    weights = discount(staleness, kind, a, b)
    if stale is not None:
        flags = np.asarray(stale, dtype=bool)
        if flags.shape != weights.shape:
            raise ValueError("stale: one flag per update")
    elif max_staleness is not None:
        flags = np.asarray(staleness, dtype=np.float64) > max_staleness
    else:
        return weights
    return np.where(flags, 0.0, weights) if policy == "drop" else weights


def fedasync_alpha(alpha: float, staleness: float, **weight_options: object) -> float:
    """FedAsync's mixing weight alpha * d(s) for one arriving update (options as above)."""
    if not 0 < alpha <= 1:
        raise ValueError(f"FedAsync alpha={alpha!r}: must be in (0, 1]")
    return float(alpha * staleness_weights([staleness], **weight_options)[0])


def buffered_weights(
    staleness: Sequence[float] | np.ndarray,
    num_samples: Sequence[float] | np.ndarray | None = None,
    *,
    normalize: bool = False,
    **weight_options: object,
) -> np.ndarray:
    """FedBuff weights of a buffer of K updates: d(s_i) n_i / sum(n) over kept updates.

    With ``num_samples`` None every n_i is 1 (FedBuff's d(s_i) / K); dropped updates get 0
    and leave the denominator. ``normalize`` rescales the weights to sum to 1 (a convex
    combination, as synchronous FedAvg), so staleness only shifts weight between updates.
    Default d is FedBuff's (1 + s)^-1/2.
    """
    weights = staleness_weights(staleness, **weight_options)
    n = np.ones_like(weights) if num_samples is None else np.asarray(num_samples, np.float64)
    if n.shape != weights.shape or np.any(n < 0):
        raise ValueError("num_samples: one non-negative count per update")
    kept = weights > 0
    total = n[kept].sum()
    if total == 0:
        return np.zeros_like(weights)
    weights = weights * n / total
    return weights / weights.sum() if normalize else weights


def default_max_staleness(durations: Sequence[float] | np.ndarray, factor: float = 2.0) -> float:
    """``factor`` x the median round duration (the seed's 2 tau), ignoring dropouts (inf)."""
    finite = np.asarray(durations, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        raise ValueError("durations: need at least one finite duration")
    return float(factor * np.median(finite))
