"""Typed experiment config: YAML + dotted ``key=value`` overrides, validated before any work.

Every error is a ``ConfigError`` naming the dotted key, the value and what is allowed.
The ``algorithm`` section holds ``name`` plus the chosen algorithm's own keys, validated
against that algorithm's ``Params`` dataclass.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedsim.errors import ConfigError


@dataclass
class PartitionConfig:
    name: str = "dirichlet"  # iid | dirichlet | pathological
    alpha: float = 0.1  # Dirichlet concentration (dirichlet)
    classes_per_client: int = 2  # k (pathological)


@dataclass
class DataConfig:
    name: str = "mnist-5k"
    root: str = "data"
    num_clients: int = 20
    train_ratio: float = 0.75
    download: bool = True
    max_samples: int | None = None  # a stratified subset before partitioning; null: all
    partition: PartitionConfig = field(default_factory=PartitionConfig)


@dataclass
class ModelConfig:
    name: str = "fedavg_cnn"


@dataclass
class ClientConfig:
    epochs: int = 1
    lr: float = 0.005
    batch_size: int = 10
    momentum: float = 0.0
    weight_decay: float = 0.0
    eval_batch_size: int = 500


@dataclass
class RuntimeConfig:
    executor: str = "ray"  # ray (a pool of worker actors) | local (in this process)
    device: str = "auto"  # auto (CUDA where a GPU is visible) | cpu | cuda | cuda:N
    # Ray pool size; None: fill the machine (one per CPU, or workers_per_gpu per GPU). Only
    # with executor=ray: the local executor runs one worker in this process (set: an error).
    workers: int | None = None
    cpus_per_worker: float = 1.0
    gpus_per_worker: float | None = None  # None: 1/workers_per_gpu on a GPU cluster, else 0
    workers_per_gpu: int = 1  # how many workers share one GPU when gpus_per_worker is None
    address: str | None = None  # "auto" or a cluster address; None: RAY_ADDRESS or a local Ray
    state_memory_gb: float | None = None  # client states in memory beyond it spill to disk


@dataclass
class AlgorithmConfig:
    name: str = "fedavg"
    params: Any = None  # the algorithm's Params dataclass, filled by ``load_config``


@dataclass
class WandbConfig:
    """``tracking.wandb``: Weights & Biases logging (fedsim/tracking/wandb_sink.py)."""

    enabled: bool = False
    project: str = "fedsim"
    entity: str | None = None
    group: str | None = None  # runs of one sweep or comparison side by side
    tags: list[str] = field(default_factory=list)
    mode: str = "online"  # online | offline | disabled; online falls back to offline
    max_client_series: int = 20  # per-client accuracy curves for clients 0..N-1


@dataclass
class TrackingConfig:
    """``tracking``: where a run is mirrored besides its run folder."""

    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class ExperimentConfig:
    name: str = "experiment"
    seed: int = 0
    rounds: int = 20
    join_ratio: float = 1.0
    eval_every: int = 1
    checkpoint_every: int = 0  # save the full state every N rounds and after the last (0: never)
    max_failed_fraction: float = 0.5  # stop if more of a cohort has non-finite losses
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (the resolved config.yaml); algorithm params inlined."""
        out = dataclasses.asdict(self)
        params = out["algorithm"].pop("params") or {}
        out["algorithm"].update(params)
        return out


def _model_resolves(name: str) -> bool:
    """Import ``model.name`` now (built-in or module:Class); ConfigError if it cannot be."""
    from lightning_modules.registry import model_class

    return model_class(name) is not None


def _dataset_resolves(name: str) -> bool:
    """Check ``data.name`` now (built-in or module:function); ConfigError if it cannot be."""
    from fedsim.data.datasets import dataset_loader

    dataset_loader(name)
    return True


# --- value checks: key -> (predicate, what is allowed) ---
def is_run_name(value: str) -> bool:
    """A run name is one folder under runs/: no separators, no leading dot, printable."""
    return (
        bool(value)
        and value.isprintable()
        and not value.startswith(".")
        and not any(sep in value for sep in ("/", "\\", "\0"))
        and len(value.encode("utf-8", "surrogateescape")) <= 200
    )


_CHECKS: dict[str, tuple[typing.Callable[[Any], bool], str]] = {
    "name": (
        is_run_name,
        "must be a folder name: no '/' or '\\', not starting with '.', at most 200 bytes",
    ),
    "rounds": (lambda v: v >= 1, "must be >= 1"),
    "join_ratio": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "eval_every": (lambda v: v >= 1, "must be >= 1"),
    "checkpoint_every": (lambda v: v >= 0, "must be >= 0 (0: no checkpoints)"),
    "max_failed_fraction": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
    "data.num_clients": (lambda v: v >= 1, "must be >= 1"),
    "data.train_ratio": (lambda v: 0 < v < 1, "must be in (0, 1)"),
    "data.max_samples": (lambda v: v is None or v >= 1, "must be >= 1 (or null: all samples)"),
    "data.partition.name": (
        lambda v: v in ("iid", "dirichlet", "pathological"),
        "allowed: iid, dirichlet, pathological",
    ),
    "data.partition.alpha": (lambda v: v > 0, "must be > 0"),
    "data.partition.classes_per_client": (lambda v: v >= 1, "must be >= 1"),
    "client.epochs": (lambda v: v >= 1, "must be >= 1"),
    "client.lr": (lambda v: v > 0, "must be > 0"),
    "client.batch_size": (lambda v: v >= 1, "must be >= 1"),
    "client.momentum": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
    "client.weight_decay": (lambda v: v >= 0, "must be >= 0"),
    "client.eval_batch_size": (lambda v: v >= 1, "must be >= 1"),
    "model.name": (_model_resolves, "a built-in name or module:Class"),
    "data.name": (_dataset_resolves, "a built-in name or module:function"),
    "runtime.executor": (lambda v: v in ("local", "ray"), "allowed: local, ray"),
    "runtime.device": (
        lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()),
        "allowed: auto, cpu, cuda, cuda:N",
    ),
    "runtime.workers": (lambda v: v is None or v >= 1, "must be >= 1 (or null: fill the machine)"),
    "runtime.cpus_per_worker": (lambda v: v > 0, "must be > 0"),
    "runtime.gpus_per_worker": (
        lambda v: v is None or v >= 0,
        "must be >= 0 (fractions allowed; null: by runtime.workers_per_gpu)",
    ),
    "runtime.workers_per_gpu": (lambda v: v >= 1, "must be >= 1"),
    "runtime.state_memory_gb": (
        lambda v: v is None or v >= 0,
        "must be >= 0 (null: a quarter of the machine's memory)",
    ),
    "tracking.wandb.project": (lambda v: bool(v.strip()), "must be a non-empty string"),
    "tracking.wandb.tags": (
        lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v),
        "must be a list of strings",
    ),
    "tracking.wandb.mode": (
        lambda v: v in ("online", "offline", "disabled"),
        "allowed: online, offline, disabled",
    ),
    "tracking.wandb.max_client_series": (lambda v: v >= 0, "must be >= 0"),
}


def checked(default: Any, predicate: typing.Callable[[Any], bool], allowed: str) -> Any:
    """A dataclass field whose range is declared next to it: ``build_dataclass`` raises a
    ConfigError saying ``allowed`` unless ``predicate(value)``; a subclass that redeclares
    the field (a new default) keeps the check."""
    return field(default=default, metadata={"check": (predicate, allowed)})


def field_check(cls: type, name: str) -> tuple[typing.Callable[[Any], bool], str] | None:
    """The ``checked`` rule of field ``name``: its own, or the nearest base class's."""
    for klass in cls.__mro__:
        declared = getattr(klass, "__dataclass_fields__", {}).get(name)
        if declared is not None and "check" in declared.metadata:
            return declared.metadata["check"]
    return None


def _type_name(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if args:
        return " or ".join(names.get(a, str(a)) for a in args) + " or null"
    return names.get(tp, str(tp))


_EXPONENT_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; ints are accepted where floats are."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(tp):
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(key, value, inner[0])
    if tp is float and isinstance(value, str) and _EXPONENT_NUMBER.match(value):
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
    if tp is float and not math.isfinite(value):
        raise ConfigError(key, value, "must be a finite number")
    return float(value) if tp is float else value


def build_dataclass(
    cls: type, raw: dict[str, Any], prefix: str = "", also_allowed: tuple[str, ...] = ()
) -> Any:
    """Build ``cls`` from a nested dict, rejecting unknown keys and wrong types."""
    if not isinstance(raw, dict):
        raise ConfigError(prefix.rstrip(".") or "config", raw, "must be a mapping of keys")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            allowed = ", ".join(sorted(fields | set(also_allowed)))
            raise ConfigError(f"{prefix}{key}", raw[key], f"unknown key (allowed: {allowed})")
    kwargs = {}
    for name in fields:
        if name not in raw:
            continue
        tp, value, key = hints[name], raw[name], f"{prefix}{name}"
        if dataclasses.is_dataclass(tp):
            kwargs[name] = build_dataclass(tp, value, f"{key}.")
        else:
            kwargs[name] = _coerce(key, value, tp)
            if key in _CHECKS and not _CHECKS[key][0](kwargs[name]):
                raise ConfigError(key, value, _CHECKS[key][1])
            rule = field_check(cls, name)
            if rule is not None and not rule[0](kwargs[name]):
                raise ConfigError(key, kwargs[name], rule[1])
    return cls(**kwargs)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses duplicate keys (plain YAML lets the last one win)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key) if isinstance(key, Hashable) else None
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping
)


def parse_yaml(text: str, key: str) -> Any:
    """YAML text -> value; any YAML error becomes a one-line ConfigError naming ``key``."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or err.__class__.__name__
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        detail = " ".join(f"{problem}{where}".split())
        raise ConfigError(key, text, f"not valid YAML ({detail})") from None


def parse_override(text: str) -> tuple[str, Any]:
    """``a.b=value`` -> ("a.b", YAML-typed value)."""
    if "=" not in text:
        raise ConfigError("override", text, "expected key=value, e.g. rounds=50")
    key, _, value = text.partition("=")
    key = key.strip()
    if not key or any(not part.isidentifier() for part in key.split(".")):
        raise ConfigError("override", text, "expected dotted.key=value, e.g. client.lr=0.01")
    return key, parse_yaml(value, key) if value.strip() else None


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set dotted keys in a nested dict (unknown keys are caught by ``build_dataclass``)."""
    for text in overrides:
        key, value = parse_override(text)
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(key, value, f"{part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return raw


def config_from_dict(raw: dict[str, Any]) -> ExperimentConfig:
    """Validate a nested dict into an ExperimentConfig (algorithm params included)."""
    from fedsim.algorithms.registry import get_algorithm_class

    raw = dict(raw or {})
    raw.pop("tune", None)  # a search's options, read by `fedsim tune` (fedsim/search/)
    algo_raw = dict(raw.pop("algorithm", None) or {})
    name = algo_raw.pop("name", AlgorithmConfig.name)
    if not isinstance(name, str):
        raise ConfigError("algorithm.name", name, "must be a string")
    cfg = build_dataclass(ExperimentConfig, raw)
    if cfg.runtime.executor == "local" and cfg.runtime.workers is not None:
        raise ConfigError(
            "runtime.workers",
            cfg.runtime.workers,
            "only with runtime.executor=ray (the local executor runs one worker, in this "
            "process): leave it null",
        )
    algo_cls = get_algorithm_class(name)
    params = build_dataclass(algo_cls.Params, algo_raw, "algorithm.", ("name",))
    cfg.algorithm = AlgorithmConfig(name=name, params=params)
    return cfg


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping; ConfigError if missing, invalid or not a mapping."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("config", str(path), "file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            "config", str(path), f"not UTF-8 text (byte {err.start}): save it as UTF-8"
        ) from None
    except OSError as err:
        raise ConfigError("config", str(path), f"cannot be read ({err.strerror})") from None
    try:
        raw = parse_yaml(text, "config") or {}
    except ConfigError as err:
        raise ConfigError("config", str(path), err.allowed) from None
    if not isinstance(raw, dict):
        raise ConfigError("config", str(path), "must be a YAML mapping")
    return raw


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML file (or start from defaults), apply overrides, validate."""
    raw = {} if path is None else read_yaml_mapping(path)
    return config_from_dict(apply_overrides(raw, overrides or []))
