"""Config section ``system``: the clients as deployed devices, in virtual seconds, for both
round kinds (plain numbers, no torch; the clock itself is ``fedsim/rounds/clock/sync.py``).

- Devices: each client's compute time per sample (``time_per_sample`` x a slowdown drawn from
  ``speeds``) and its upload / download bandwidth (bytes per second x a slowdown from
  ``network_speeds``), or both read from ``device_trace``.
- Availability: always, a per-round chance (``availability``), or on/off intervals read from
  ``availability_trace``; ``dropout``: the chance that a client that starts a round goes
  offline before it reports.
- Synchronous rounds as deployed systems run them: ``overcommit`` (sample more, keep the
  first K to finish), ``deadline``, and what a round with fewer than ``min_clients`` reports
  does (``short_round``).

``asynchronous.speeds`` and ``asynchronous.dropout`` were these keys' names before; a config
that still uses them is read as ``system.speeds`` / ``system.dropout`` with a note.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsim.checks import checked
from fedsim.errors import ConfigError

SHORT_ROUNDS = ("skip", "retry")
MOVED_KEYS = ("speeds", "dropout")  # asynchronous.<key> before, system.<key> now


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


def parse_speeds(spec: str, key: str = "system.speeds") -> SpeedSpec:
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


def _speeds_ok(spec: str | None, key: str = "system.speeds") -> bool:
    """True, or the ConfigError saying what is wrong with the spec."""
    return spec is None or bool(parse_speeds(spec, key))


def _positive_or_null(value: float | None) -> bool:
    return value is None or value > 0


@dataclass
class SystemConfig:
    """``system``: the clients' devices, networks and availability in virtual seconds (see
    the module doc); every default leaves a run as it was, without a clock."""

    # compute slowdown per client, drawn from a spec (x time_per_sample); null: all 1
    speeds: str | None = checked(None, _speeds_ok, f"allowed: null or {SPEED_SPECS}")
    time_per_sample: float = checked(  # virtual seconds a client of slowdown 1 trains one sample
        1.0, lambda v: v > 0, "must be > 0"
    )
    upload_bandwidth: float | None = checked(  # bytes/s of a network of slowdown 1; null: free
        None, _positive_or_null, "must be > 0 (or null: uploads take no time)"
    )
    download_bandwidth: float | None = checked(  # bytes/s of a network of slowdown 1; null: free
        None, _positive_or_null, "must be > 0 (or null: downloads take no time)"
    )
    # network slowdown per client (both directions), specs as speeds; null: all 1
    network_speeds: str | None = checked(
        None,
        lambda v: _speeds_ok(v, "system.network_speeds"),
        f"allowed: null or {SPEED_SPECS}",
    )
    # per client: seconds per sample and bandwidths from a trace (CSV, or FedScale's device
    # capacity file); replaces speeds, time_per_sample and the bandwidth keys
    device_trace: str | None = None
    availability: float = checked(  # chance a client is online when a round samples; 1: always
        1.0, lambda v: 0 < v <= 1, "must be in (0, 1]"
    )
    # per client on/off intervals (CSV, or FedScale's behaviour trace); replaces availability
    availability_trace: str | None = None
    dropout: float = checked(  # chance a client that starts a round goes offline unreported
        0.0, lambda v: 0 <= v < 1, "must be in [0, 1)"
    )
    overcommit: float = checked(  # synchronous: sample ceil(overcommit x K), keep the first K
        1.0, lambda v: v >= 1, "must be >= 1 (1: sample exactly the clients a round needs)"
    )
    deadline: float | None = checked(  # synchronous: later reports (virtual s) are dropped
        None, _positive_or_null, "must be > 0 (or null: no deadline)"
    )
    min_clients: int = checked(  # synchronous: a round with fewer reports is short
        1, lambda v: v >= 1, "must be >= 1"
    )
    short_round: str = checked(  # skip (no aggregation, time moves on) | retry (sample again)
        "skip", lambda v: v in SHORT_ROUNDS, f"allowed: {', '.join(SHORT_ROUNDS)}"
    )

    @property
    def timed(self) -> bool:
        """Whether a synchronous run gets a virtual clock (any key off its default)."""
        return self != SystemConfig()

    @property
    def times_network(self) -> bool:
        """Whether transfers take time (a bandwidth, or a device trace's)."""
        return (
            self.upload_bandwidth is not None
            or self.download_bandwidth is not None
            or self.device_trace is not None
        )

    @property
    def gates_clients(self) -> bool:
        """Whether a synchronous round may keep fewer clients than it samples, or sample from
        fewer than all: availability, dropout, over-selection or a deadline."""
        return (
            self.availability < 1
            or self.availability_trace is not None
            or self.dropout > 0
            or self.overcommit > 1
            or self.deadline is not None
        )


def move_old_keys(raw: dict) -> list[str]:
    """Move ``asynchronous.speeds`` / ``asynchronous.dropout`` of a raw config dict to
    ``system``, in place; the notes to print (ConfigError if both places set one)."""
    old = raw.get("asynchronous")
    if not isinstance(old, dict) or not any(k in old for k in MOVED_KEYS):
        return []
    old = raw["asynchronous"] = dict(old)
    new = raw.get("system")
    new = raw["system"] = dict(new) if isinstance(new, dict) else ({} if new is None else new)
    notes = []
    for key in MOVED_KEYS:
        if key not in old:
            continue
        value = old.pop(key)
        if value == getattr(SystemConfig, key):  # an old config.yaml spelling out a default
            continue
        if isinstance(new, dict) and key in new:
            raise ConfigError(
                f"asynchronous.{key}", value, f"is system.{key} now, and system.{key} is set too"
            )
        if isinstance(new, dict):
            new[key] = value
        notes.append(f"asynchronous.{key} is system.{key} now (read as system.{key})")
    return notes
