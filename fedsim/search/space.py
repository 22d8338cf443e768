"""The search-space language of ``fedsim tune``: ``key=kind(args)``, checked before Ray starts.

Kinds: ``loguniform(a,b)``, ``uniform(a,b)``, ``randint(a,b)`` (a <= v < b),
``choice(v1,v2,...)`` (sampled) and ``grid(v1,v2,...)`` (every value, ``samples`` times).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from fedsim.config import apply_overrides, config_from_dict
from fedsim.config.build import EXPONENT_NUMBER
from fedsim.errors import ConfigError

SPACE_KINDS = ("loguniform", "uniform", "randint", "choice", "grid")
_SPACE = re.compile(r"^\s*([a-z]+)\s*\((.*)\)\s*$", re.S)
_USAGE = (
    "expected key=space with space one of loguniform(a,b), uniform(a,b), randint(a,b), "
    "choice(v1,v2,...), grid(v1,v2,...)"
)


@dataclass(frozen=True)
class Space:
    """One searched key: ``kind`` in SPACE_KINDS and its arguments."""

    key: str
    kind: str
    args: tuple[Any, ...]

    def to_tune(self) -> Any:
        """The Ray Tune domain (imports Ray)."""
        from ray import tune

        if self.kind == "loguniform":
            return tune.loguniform(*self.args)
        if self.kind == "uniform":
            return tune.uniform(*self.args)
        if self.kind == "randint":
            return tune.randint(*self.args)
        if self.kind == "choice":
            return tune.choice(list(self.args))
        return tune.grid_search(list(self.args))

    def mutation(self) -> Any:
        """What Population Based Training mutates from (its ``hyperparam_mutations``): a list
        of the values of ``choice``/``grid`` (PBT shifts to a neighbour or resamples), else
        the Tune domain (resampled, or the value times 0.8 or 1.2: ``clip`` keeps it inside)."""
        return list(self.args) if self.kind in ("choice", "grid") else self.to_tune()

    def clip(self, value: Any) -> Any:
        """``value`` inside the space (PBT's x0.8 / x1.2 can step out of a range)."""
        if self.kind in ("choice", "grid"):
            return value
        low, high = self.args
        if self.kind == "randint":
            return int(min(max(round(value), low), high - 1))
        return float(min(max(value, low), high))

    def extremes(self) -> list[Any]:
        """Values that bound the space (checked against the config before any trial)."""
        if self.kind in ("choice", "grid"):
            return list(self.args)
        if self.kind == "randint":
            return [self.args[0], self.args[1] - 1]
        return list(self.args)


def _number(value: Any) -> Any:
    """``1e-3`` as the number a config reads it as (YAML 1.1, which PyYAML speaks, reads an
    exponent without a dot as text; a config's values go through the same rule)."""
    if isinstance(value, str) and EXPONENT_NUMBER.match(value):
        return float(value)
    return value


def parse_space(text: str) -> Space:
    """``key=loguniform(10,2000)`` -> Space (raises ConfigError naming the search)."""
    key, sep, spec = text.partition("=")
    match = _SPACE.match(spec)
    if not sep or not key.strip() or not match or match.group(1) not in SPACE_KINDS:
        raise ConfigError("--search", text, _USAGE)
    kind, inner = match.group(1), match.group(2)
    try:
        args = [_number(a) for a in yaml.safe_load(f"[{inner}]")]
    except yaml.YAMLError:
        raise ConfigError("--search", text, "arguments are not valid values") from None
    if kind in ("loguniform", "uniform", "randint"):
        numbers = all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
        if len(args) != 2 or not numbers or not args[0] < args[1]:
            raise ConfigError("--search", text, f"{kind} needs two numbers a < b")
        if kind == "loguniform" and args[0] <= 0:
            raise ConfigError("--search", text, "loguniform needs 0 < a < b")
        if kind == "randint" and not all(isinstance(a, int) for a in args):
            raise ConfigError("--search", text, "randint needs two integers a < b")
    elif not args:
        raise ConfigError("--search", text, f"{kind} needs at least one value")
    return Space(key=key.strip(), kind=kind, args=tuple(args))


def changes_mid_run(key: str) -> bool:
    """Whether a run may continue from a checkpoint with ``key`` changed (what a Population
    Based Training exploit does): the clients' training (``client.*``), the algorithm's own
    keys (not ``algorithm.name``) and ``join_ratio``. The data, the model, the deployment
    options and the round structure are what a checkpoint was made of: they stay."""
    if key == "join_ratio" or key.startswith("client."):
        return True
    return key.startswith("algorithm.") and key != "algorithm.name"


def with_values(raw: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of the raw config dict with dotted keys set to ``values``."""
    return apply_overrides(
        copy.deepcopy(raw), [f"{key}={json.dumps(value)}" for key, value in values.items()]
    )


def validate_search(raw: dict[str, Any], spaces: list[Space]) -> None:
    """Every bounding value of every space must make a valid config (before Ray starts)."""
    keys = [s.key for s in spaces]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ConfigError("--search", duplicates[0], "searched twice")
    for space in spaces:
        for value in space.extremes():
            config_from_dict(with_values(raw, {space.key: value}))
