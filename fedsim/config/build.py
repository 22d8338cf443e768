"""Validating a config: a nested dict (YAML + overrides) into a typed ``ExperimentConfig``.

Every error is a one-line ``ConfigError`` naming the dotted key, the value and what is
allowed. ``algorithm`` holds ``name`` plus that algorithm's own keys (its ``Params``
dataclass, read from ``fedsim.algorithm_params`` without importing the algorithm).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from fedsim.algorithm_params import params_class
from fedsim.algorithm_params.base import configuring
from fedsim.checks import field_check, field_group
from fedsim.config.adapter_keys import check_adapter_keys
from fedsim.config.client import ClientConfig
from fedsim.config.compose import load_raw
from fedsim.config.effects import check_effective
from fedsim.config.experiment import ExperimentConfig
from fedsim.config.lr_schedule import translate_lr_schedule
from fedsim.config.model_optimizer import resolve_optimizer_keys
from fedsim.config.scheduled import check_schedules, take_schedules
from fedsim.config.sections import AlgorithmConfig
from fedsim.config.suggest import closest_key, foreign_algorithm_key
from fedsim.config.system import move_old_keys
from fedsim.data.names import PREPARED_DATASET_NAMES
from fedsim.errors import ConfigError


def _type_name(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args:
        return " or ".join(names.get(a, str(a)) for a in args) + " or null"
    return names.get(tp, str(tp))


EXPONENT_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted where floats are."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(key, value, inner[0])
    if tp is float and isinstance(value, str) and EXPONENT_NUMBER.match(value):
        value = float(value)  # YAML 1.1 reads 1e-3 (no dot) as a string; YAML 1.2 as a number
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(tp)
    if ok is None or tp is Any:
        return value
    if not ok:
        raise ConfigError(key, value, f"must be {_type_name(tp)}")
    if tp is float:
        try:
            value = float(value)  # an integer written out in full may not fit a float
        except OverflowError:
            raise ConfigError(key, value, "must be a finite number (this one overflows)") from None
        if not math.isfinite(value):
            raise ConfigError(key, value, "must be a finite number")
    return value


def unknown_key(cls: type, also_allowed: tuple[str, ...] = (), given: str = "") -> str:
    """What an unknown key's error says: the allowed key nearest ``given`` (the dotted key
    as written), then the section's own keys, then each group's apart."""
    groups: dict[str, list[str]] = {}
    for f in dataclasses.fields(cls):
        groups.setdefault(field_group(cls, f.name), []).append(f.name)
    near = closest_key(given, [f.name for f in dataclasses.fields(cls)] + list(also_allowed))
    own = sorted([*groups.pop("", []), *also_allowed])
    foreign = foreign_algorithm_key(given)  # personal_layers for ditto: FedPer's, say so
    if near and near.rpartition(".")[0] != given.rpartition(".")[0]:
        foreign = None  # algorithm.lr: client.lr, a key of another section, is nearer
    suggestion = f": {foreign}" if foreign else f", did you mean {near}?" if near else ""
    text = "unknown key" + suggestion
    text += f" (allowed: {', '.join(own)}"
    for group, names in groups.items():
        text += f"; {group.split(' (')[0]}: {', '.join(sorted(names))}"
    return text + ")"


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, resolved once per class (~10 per config read, each
    evaluating the class's annotation strings again); read-only."""
    return typing.get_type_hints(cls)


def build_dataclass(
    cls: type, raw: dict[str, Any], prefix: str = "", also_allowed: tuple[str, ...] = ()
) -> Any:
    """Build ``cls`` from a nested dict, rejecting unknown keys and wrong types."""
    if not isinstance(raw, dict):
        raise ConfigError(prefix.rstrip(".") or "config", raw, "must be a mapping of keys")
    hints = type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            given = f"{prefix}{key}"
            raise ConfigError(given, raw[key], unknown_key(cls, also_allowed, given))
    kwargs = {}
    for name in fields:
        if name not in raw:
            continue
        tp, value, key = hints[name], raw[name], f"{prefix}{name}"
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build_dataclass(tp, value, f"{key}.")
        else:
            kwargs[name] = _coerce(key, value, tp)
            rule = field_check(cls, name)
            if rule is not None and not rule[0](kwargs[name]):
                raise ConfigError(key, kwargs[name], rule[1])
    return cls(**kwargs)


def config_from_dict(raw: dict[str, Any]) -> ExperimentConfig:
    """Validate a nested dict into an ExperimentConfig (algorithm params included)."""
    raw = dict(raw or {})
    raw.pop("tune", None)  # a search's options, read by `fedsim tune` (fedsim/search/)
    for note in [*move_old_keys(raw), *translate_lr_schedule(raw)]:  # old keys keep working
        print(f"fedsim: note: {note}", file=sys.stderr)
    algo_raw = raw.pop("algorithm", None)
    algo_raw = {} if algo_raw is None else algo_raw  # false, 0, [] are refused below
    if not isinstance(algo_raw, dict):
        raise ConfigError("algorithm", algo_raw, "must be a mapping of keys")
    algo_raw = dict(algo_raw)
    name = algo_raw.pop("name", AlgorithmConfig.name)
    if not isinstance(name, str):
        raise ConfigError("algorithm.name", name, "must be a string")
    schedules = {}
    if isinstance(raw.get("client"), dict):
        raw["client"] = dict(raw["client"])
        schedules.update(take_schedules(raw["client"], ClientConfig, "client."))
    cfg = build_dataclass(ExperimentConfig, raw)
    resolve_prepared(cfg.data)
    if cfg.runtime.executor == "local" and cfg.runtime.workers is not None:
        raise ConfigError(
            "runtime.workers",
            cfg.runtime.workers,
            "only with runtime.executor=ray (the local executor runs one worker, in this "
            "process): leave it null",
        )
    with configuring(name):  # errors of a subclass's inherited keys name the subclass
        schedules.update(take_schedules(algo_raw, params_class(name), "algorithm."))
        params = build_dataclass(params_class(name), algo_raw, "algorithm.", ("name",))
    cfg.algorithm = AlgorithmConfig(name=name, params=params)
    cfg.schedules.update(schedules)
    resolve_optimizer_keys(cfg)
    check_schedules(cfg)
    check_effective(cfg)
    check_adapter_keys(cfg)
    return cfg


def resolve_prepared(data: Any) -> None:
    """A dataset ``make data`` prepares (``data.name=debian-reference``, ``fedsim/data/
    prepared.py``) becomes the ``hf:``
    path of its file under ``data.root`` (missing, the data's build says to run ``make
    data``), its text column the input unless ``data.input_column`` names another."""
    if data.name not in PREPARED_DATASET_NAMES:
        return
    from fedsim.data.prepared import resolve

    data.name = resolve(data.name, data.root)
    if data.input_column == "image":  # the default, which names no column of text data
        data.input_column = "text"


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML file (with its ``base`` configs; or start from defaults), apply overrides,
    resolve ``${...}``, validate (``compose.py``)."""
    return config_from_dict(load_raw(path, overrides))
