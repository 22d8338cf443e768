"""Config section ``asynchronous``: FedBuff / FedAsync rounds in virtual time, and the
clients' simulated speeds (``asynchronous.speeds``, parsed here: plain numbers, no torch).
The round kind that runs them is ``fedsim/rounds/buffered.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsim.checks import checked
from fedsim.errors import ConfigError

STALENESS_DISCOUNTS = ("constant", "polynomial")
STALE_POLICIES = ("discount", "drop")


SPEED_SPECS = (
    "constant | lognormal:MU,SIGMA (SIGMA >= 0) | uniform:LOW,HIGH (0 < LOW <= HIGH) | "
    "slow_fraction:FRACTION,FACTOR (0 <= FRACTION <= 1, FACTOR >= 1)"
)


@dataclass(frozen=True)
class SpeedSpec:
    """A parsed ``asynchronous.speeds`` value: distribution name and its parameters."""

    kind: str
    params: tuple[float, ...] = ()


SPREAD = 8.0  # lognormal: slowdowns within exp(MU +- SPREAD * SIGMA) must be finite and > 0


def parse_speeds(spec: str, key: str = "asynchronous.speeds") -> SpeedSpec:
    """Parse ``"lognormal:0,0.5"``-style specs; a bad one raises a one-line ConfigError."""

    def bad(why: str) -> ConfigError:  # a ValueError too
        return ConfigError(key, spec, f"{why}; allowed: {SPEED_SPECS}")

    if not isinstance(spec, str):
        raise bad("not a string")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.strip()
    arity = {"constant": 0, "lognormal": 2, "uniform": 2, "slow_fraction": 2}
    if kind not in arity:
        raise bad(f"unknown distribution {kind!r}")
    try:
        params = tuple(float(p) for p in rest.split(",")) if rest.strip() else ()
    except ValueError:
        raise bad("parameters must be numbers") from None
    if len(params) != arity[kind]:
        raise bad(f"{kind} takes {arity[kind]} parameters, got {len(params)}")
    if not all(np.isfinite(params)):
        raise bad("parameters must be finite")
    if kind == "lognormal" and params[1] < 0:
        raise bad("SIGMA must be >= 0")
    if kind == "lognormal" and abs(params[0]) + SPREAD * params[1] > 700:
        # validate what it computes: exp(800) is inf, exp(-800) is 0 (a client that never
        # takes time, or never arrives)
        raise bad(f"exp(MU +- {SPREAD:g} SIGMA) overflows; need |MU| + {SPREAD:g} SIGMA <= 700")
    if kind == "uniform" and not 0 < params[0] <= params[1]:
        raise bad("need 0 < LOW <= HIGH")
    if kind == "slow_fraction" and not (0 <= params[0] <= 1 and params[1] >= 1):
        raise bad("need 0 <= FRACTION <= 1 and FACTOR >= 1")
    return SpeedSpec(kind, params)


def _speeds_ok(spec: str | None) -> bool:
    """True, or the ConfigError saying what is wrong with the spec."""
    return spec is None or bool(parse_speeds(spec))


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
    # clients' speeds (virtual time per sample trained); null: all equal. Set in a
    # synchronous run, it logs that run's sim_time too
    speeds: str | None = checked(None, _speeds_ok, f"allowed: null or {SPEED_SPECS}")
    dropout: float = checked(  # chance that a dispatched client never reports back
        0.0, lambda v: 0 <= v < 1, "must be in [0, 1)"
    )
