"""Values that change over rounds: a config key given as a schedule instead of a number.

A schedulable numeric key (``client.lr``, ``algorithm.mu``, ``algorithm.server_lr``...) takes
a number, as always, or a mapping with a ``schedule`` kind (pfl-research's ``HyperParam``,
Flower's ``on_fit_config_fn(server_round)``). With r the 0-based round and R ``rounds``:

- ``step``: ``initial * factor ** (r // every)``;
- ``exponential``: ``initial * decay ** r``;
- ``cosine``: ``final + (initial - final) * (1 + cos(pi * min(r, R) / R)) / 2`` (``final``
  0, ``rounds`` the run's unless given);
- ``warmup``: linear from ``start`` (0) to ``initial`` over ``rounds`` rounds, then
  ``initial``: ``start + (initial - start) * min(1, (r + 1) / rounds)``;
- ``piecewise``: ``values``, a mapping from a first round to the value from that round on
  (it must give round 0);
- ``adaptive``: moved by a metric of the rounds run (lower is better; pfl-research's
  ``AdaptMuOnMetricCallback``, FedProx's appendix C.3.3): every ``every`` rounds, the value
  goes down by ``step`` once the metric has fallen ``patience`` times in a row and up by
  ``step`` when it did not fall, kept within [``low``, ``high``].

An integer key takes the nearest integer of its value. Torch-free: the config reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fedsim.errors import ConfigError, show_value

KINDS = ("step", "exponential", "cosine", "warmup", "piecewise", "adaptive")
# each kind's keys and their defaults (None: required)
KEYS: dict[str, dict[str, Any]] = {
    "step": {"initial": None, "factor": None, "every": None},
    "exponential": {"initial": None, "decay": None},
    "cosine": {"initial": None, "final": 0.0, "rounds": None},
    "warmup": {"initial": None, "rounds": None, "start": 0.0},
    "piecewise": {"values": None},
    "adaptive": {
        "initial": None, "metric": "train_loss", "step": 0.1, "every": 1, "patience": 1,
        "low": 0.0, "high": 1.0,
    },
}  # fmt: skip
COUNTS = ("every", "rounds", "patience")  # keys that are a number of rounds (>= 1)
TEXT = ("metric",)


@dataclass(frozen=True)
class Schedule:
    """One key's schedule: its kind and that kind's settings (``KEYS``)."""

    kind: str
    settings: dict[str, Any] = field(default_factory=dict)
    integer: bool = False  # the key is an integer: values are rounded to the nearest

    @property
    def adaptive(self) -> bool:
        return self.kind == "adaptive"

    @property
    def initial(self) -> float:
        """The value in round 0."""
        if self.kind == "piecewise":
            return self._rounded(self.settings["values"][0])
        if self.kind == "warmup":
            return self.at(0, 1)
        return self._rounded(self.settings["initial"])

    def at(self, round_idx: int, rounds: int) -> float:
        """The value in round ``round_idx`` of a run of ``rounds`` (not for ``adaptive``,
        whose value the metric moves: ``Adapting``)."""
        try:
            return self._rounded(self._raw(round_idx, rounds))
        except OverflowError:  # a growth past float's range: an infinite value, refused
            return math.copysign(math.inf, self.settings.get("initial", 1.0))

    def _raw(self, round_idx: int, rounds: int) -> float:
        s, r = self.settings, round_idx
        if self.kind == "step":
            value = s["initial"] * s["factor"] ** (r // s["every"])
        elif self.kind == "exponential":
            value = s["initial"] * s["decay"] ** r
        elif self.kind == "cosine":
            total = s["rounds"] or rounds
            value = s["final"] + (s["initial"] - s["final"]) * 0.5 * (
                1 + math.cos(math.pi * min(r, total) / max(total, 1))
            )
        elif self.kind == "warmup":
            value = s["start"] + (s["initial"] - s["start"]) * min(1.0, (r + 1) / s["rounds"])
        elif self.kind == "piecewise":
            value = s["values"][max(b for b in s["values"] if b <= r)]
        else:
            raise ValueError("an adaptive value is moved by its metric: use Adapting")
        return value

    def _rounded(self, value: float) -> float:
        """The value as its key holds it: an integer key's nearest int (a loop count reads
        it: ``range(K)``), else a float."""
        if self.integer and math.isfinite(value):
            return int(math.floor(value + 0.5))
        return float(value)

    def as_key(self, value: float) -> float | int:
        """``value`` as its key holds it: an int for an integer key (the key's own check
        sees 2, not 2.0)."""
        return int(value) if self.integer and math.isfinite(value) else value

    def to_dict(self) -> dict[str, Any]:
        """The mapping the config gave (config.yaml writes it back as it was)."""
        return {"schedule": self.kind, **self.settings}


@dataclass
class Adapting:
    """An adaptive schedule's state: its value now, the metric last seen, the falls in a
    row. A function of the rounds' metrics, so a resumed run rebuilds it from its history."""

    schedule: Schedule
    value: float = 0.0
    previous: float = math.inf
    falls: int = 0

    def __post_init__(self) -> None:
        self.value = self.schedule.initial

    def observe(self, round_idx: int, summary: dict[str, Any]) -> None:
        """After round ``round_idx``: move the value by the round's metric (when it has one)."""
        s = self.schedule.settings
        metric = summary.get(s["metric"])
        if round_idx % s["every"] != 0 or not isinstance(metric, (int, float)):
            return
        if metric < self.previous:
            self.falls += 1
            if self.falls >= s["patience"]:
                self.value = max(s["low"], self.value - s["step"])
        else:
            self.falls = 0
            self.value = min(s["high"], self.value + s["step"])
        self.value = self.schedule._rounded(self.value)
        self.previous = float(metric)


def is_schedule(value: Any) -> bool:
    """Whether a config value is given as a schedule (a mapping with a ``schedule`` kind)."""
    return isinstance(value, dict) and "schedule" in value


def _number(key: str, name: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value)  # YAML 1.1 reads 1e-3 as text
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}.{name}", value, "must be a finite number")
    return float(value)


def parse_schedule(key: str, raw: dict[str, Any], integer: bool = False) -> Schedule:
    """A config mapping as a ``Schedule``; a ConfigError names the key and what is allowed."""
    kind = raw.get("schedule")
    if kind not in KINDS:
        raise ConfigError(f"{key}.schedule", kind, f"allowed: {', '.join(KINDS)}")
    allowed = KEYS[kind]
    settings: dict[str, Any] = {}
    for name, value in raw.items():
        if name == "schedule":
            continue
        if name not in allowed:
            raise ConfigError(
                f"{key}.{name}", value, f"unknown key of a {kind} schedule "
                f"(allowed: {', '.join(allowed)})",
            )  # fmt: skip
        settings[name] = value
    for name, default in allowed.items():
        if name not in settings:
            if default is None and not (kind == "cosine" and name == "rounds"):
                raise ConfigError(f"{key}.{name}", None, f"required by a {kind} schedule")
            settings[name] = default
        elif name in TEXT:
            if not isinstance(settings[name], str) or not settings[name]:
                raise ConfigError(f"{key}.{name}", settings[name], "must be a metric's name")
        elif name == "values":
            settings[name] = _piecewise(key, settings[name])
        elif name in COUNTS:
            v = settings[name]
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ConfigError(f"{key}.{name}", v, "must be an integer >= 1 (rounds)")
        else:
            settings[name] = _number(key, name, settings[name])
    if kind == "adaptive" and not settings["low"] <= settings["high"]:
        raise ConfigError(f"{key}.low", settings["low"], f"must be <= high={settings['high']}")
    return Schedule(kind, settings, integer)


def _piecewise(key: str, values: Any) -> dict[int, float]:
    """``{first round: value}`` (a mapping, or a list of [round, value] pairs), from round 0."""
    pairs = values.items() if isinstance(values, dict) else values
    out: dict[int, float] = {}
    try:
        for first, value in pairs:
            first = int(first) if isinstance(first, str) and first.isdigit() else first
            if not (isinstance(first, int) and not isinstance(first, bool) and first >= 0):
                raise ConfigError(f"{key}.values", values, "rounds must be integers >= 0")
            out[first] = _number(key, f"values.{first}", value)
    except (TypeError, ValueError) as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(
            f"{key}.values", values, "must map a first round to a value, e.g. {0: 0.1, 10: 0.01}"
        ) from None
    if 0 not in out:
        raise ConfigError(f"{key}.values", values, "must give round 0's value")
    return dict(sorted(out.items()))


def check_values(key: str, schedule: Schedule, rounds: int, allowed: Any) -> None:
    """Every value the schedule can take passes the key's own check ``allowed`` (a
    ``(predicate, text)`` pair): each round's, or an adaptive one's start and bounds."""
    if schedule.adaptive:
        if allowed is not None:
            predicate, text = allowed
            s = schedule.settings
            for name in ("initial", "low", "high"):
                if not predicate(schedule.as_key(schedule._rounded(s[name]))):
                    raise ConfigError(f"{key}.{name}", s[name], text)
        return
    for r in range(rounds):
        value = schedule.as_key(schedule.at(r, rounds))
        if not math.isfinite(value):
            raise ConfigError(
                key, schedule.to_dict(), f"round {r} gives {show_value(value)}, which is past "
                "float's range: every round's value must be a finite number",
            )  # fmt: skip
        if allowed is not None and not allowed[0](value):
            raise ConfigError(
                key, schedule.to_dict(), f"round {r} gives {show_value(value)}, "
                f"which {allowed[1]}",
            )  # fmt: skip
