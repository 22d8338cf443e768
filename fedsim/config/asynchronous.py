"""Config section ``asynchronous``: FedBuff / FedAsync rounds in virtual time. The clients'
speeds, networks, availability and dropout are the ``system`` section's (``system.py``),
which synchronous rounds read too. The round kind that runs them is
``fedsim/rounds/buffered.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.checks import checked

STALENESS_DISCOUNTS = ("constant", "polynomial")
STALE_POLICIES = ("discount", "drop")


@dataclass
class AsyncConfig:
    """``asynchronous``: clients train at their own simulated speed and the server aggregates
    every ``buffer_size`` arrivals (FedBuff; 1: FedAsync), in virtual time.

    Named ``asynchronous``, not ``async``: ``async`` is a reserved word in Python.
    """

    enabled: bool = False  # asynchronous rounds in virtual time (one round = one aggregation)
    buffer_size: int | None = checked(  # K: updates per aggregation (1: FedAsync); null: C / 2
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: half the concurrency)"
    )
    concurrency: int | None = checked(  # C: clients training at once; null: the clients per round
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: join_ratio * clients)"
    )
    # an update whose client took longer than this (virtual time) is stale; null: 2 tau, tau
    # the median client round time
    max_staleness: float | None = checked(
        None, lambda v: v is None or v > 0, "must be > 0 (or null: 2 x the median round time)"
    )
    stale: str = checked(  # discount (use a stale update, down-weighted) | drop (discard it)
        "discount", lambda v: v in STALE_POLICIES, f"allowed: {', '.join(STALE_POLICIES)}"
    )
    staleness_discount: str = checked(  # d(s) of staleness s: constant 1 | polynomial (1+s)^-a
        "polynomial",
        lambda v: v in STALENESS_DISCOUNTS,
        f"allowed: {', '.join(STALENESS_DISCOUNTS)}",
    )
    staleness_exponent: float = checked(  # a of the polynomial discount (FedBuff: 0.5)
        0.5, lambda v: v >= 0, "must be >= 0"
    )
