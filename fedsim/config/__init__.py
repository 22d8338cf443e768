"""Typed experiment config, validated before any work (YAML and overrides: config_yaml.py).

Every error is a ``ConfigError`` naming the dotted key, the value and what is allowed; each
field's range is declared on it with ``checked`` (fedsim/checks.py), as ``fedsim keys`` shows.
``algorithm`` holds ``name`` plus that algorithm's own keys (its ``Params`` dataclass).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsim.checks import checked, field_check
from fedsim.config_yaml import apply_overrides, read_yaml_mapping
from fedsim.deployment.settings import (
    AggregationConfig,
    AsyncConfig,
    AttackConfig,
    CompressionConfig,
    PrivacyConfig,
)
from fedsim.errors import ConfigError


def is_run_name(value: str) -> bool:
    """A run name is one folder under runs/: no separators, no leading dot, printable."""
    return (
        bool(value)
        and value.isprintable()
        and not value.startswith(".")
        and not any(sep in value for sep in ("/", "\\", "\0"))
        and len(value.encode("utf-8", "surrogateescape")) <= 200
    )


def _model_resolves(name: str) -> bool:
    """A built-in ``model.name``, or a module:Class imported now; ConfigError if it cannot be.
    (Built-ins are built, and Lightning imported, later: the config check stays fast.)"""
    from lightning_modules.registry import is_builtin, model_class

    return is_builtin(name) or model_class(name) is not None


def _dataset_resolves(name: str) -> bool:
    """Check ``data.name`` now (built-in or module:function); ConfigError if it cannot be."""
    from fedsim.data.datasets import dataset_loader

    dataset_loader(name)
    return True


_PARTITIONS = ("iid", "dirichlet", "pathological", "relabel", "rotation", "clustered")


@dataclass
class PartitionConfig:
    name: str = checked(  # iid | dirichlet | pathological | relabel | rotation | clustered
        "dirichlet", lambda v: v in _PARTITIONS, "allowed: " + ", ".join(_PARTITIONS)
    )
    alpha: float = checked(  # Dirichlet concentration (dirichlet; clustered: per cluster)
        0.1, lambda v: v > 0, "must be > 0"
    )
    classes_per_client: int = checked(2, lambda v: v >= 1, "must be >= 1")  # k (pathological)
    # Clusters C of relabel / rotation / clustered (client k in cluster k % C); null: 4 (or
    # the number of clients if fewer) for relabel and clustered, continuous angles for rotation
    clusters: int | None = checked(
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: the setting's default)"
    )
    step: float = checked(  # rotation without clusters: client k turned k * step degrees
        4.0, math.isfinite, "must be a finite number (degrees)"
    )
    base: str = checked(  # the split relabel / rotation start from: iid | dirichlet | pathological
        "iid",
        lambda v: v in ("iid", "dirichlet", "pathological"),
        "allowed: iid, dirichlet, pathological",
    )
    sigma: float = checked(  # clustered: clients' spread around their cluster's class mix
        1.0, lambda v: v > 0, "must be > 0"
    )


@dataclass
class DataConfig:
    name: str = checked(  # mnist(-5k), fashion-mnist, cifar10/100, shakespeare, leaf-shakespeare
        "mnist-5k", _dataset_resolves, "a built-in name or module:function"
    )
    root: str = "data"  # folder the datasets are read from (and downloaded to)
    num_clients: int = checked(20, lambda v: v >= 1, "must be >= 1")  # clients to split into
    train_ratio: float = checked(  # each client's share for training; the rest is its test
        0.75, lambda v: 0 < v < 1, "must be in (0, 1)"
    )
    download: bool = True  # download a built-in dataset missing under data.root
    max_samples: int | None = checked(  # a stratified subset before partitioning; null: all
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: all samples)"
    )
    min_samples: int = checked(  # shakespeare: roles with fewer samples are left out
        64, lambda v: v >= 2, "must be >= 2 (a client needs a train and a test sample)"
    )
    max_client_samples: int | None = checked(  # shakespeare: a role's first N samples; null: all
        None, lambda v: v is None or v >= 2, "must be >= 2 (or null: all of a client's samples)"
    )
    plays: int | None = checked(  # shakespeare: the roles come from this many plays, dealt in turn
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: the largest roles of any play)"
    )
    partition: PartitionConfig = field(default_factory=PartitionConfig)


@dataclass
class ModelConfig:
    name: str = checked(  # the network: fedavg_cnn, resnet18, or your module:Class
        "fedavg_cnn", _model_resolves, "a built-in name or module:Class"
    )


@dataclass
class ClientConfig:
    epochs: int = checked(1, lambda v: v >= 1, "must be >= 1")  # local epochs per round
    lr: float = checked(0.005, lambda v: v > 0, "must be > 0")  # client SGD learning rate
    batch_size: int = checked(10, lambda v: v >= 1, "must be >= 1")  # training batch size
    momentum: float = checked(0.0, lambda v: 0 <= v < 1, "must be in [0, 1)")  # SGD momentum
    weight_decay: float = checked(0.0, lambda v: v >= 0, "must be >= 0")  # SGD L2 penalty
    eval_batch_size: int = checked(500, lambda v: v >= 1, "must be >= 1")  # evaluation batch
    clip_grad_norm: float | None = checked(  # clip each step's gradient to this L2 norm
        None, lambda v: v is None or v > 0, "must be > 0 (or null: no clipping)"
    )


@dataclass
class RuntimeConfig:
    executor: str = checked(  # ray (a pool of worker actors) | local (in this process)
        "ray", lambda v: v in ("local", "ray"), "allowed: local, ray"
    )
    device: str = checked(  # auto (CUDA where a GPU is visible) | cpu | cuda | cuda:N
        "auto",
        lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()),
        "allowed: auto, cpu, cuda, cuda:N",
    )
    # Ray pool size; None: fill the machine (one per CPU, or workers_per_gpu per GPU). Only
    # with executor=ray: the local executor runs one worker in this process (set: an error).
    workers: int | None = checked(
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: fill the machine)"
    )
    cpus_per_worker: float = checked(  # CPUs Ray reserves for each worker actor
        1.0, lambda v: v > 0, "must be > 0"
    )
    gpus_per_worker: float | None = checked(  # None: 1/workers_per_gpu on a GPU cluster, else 0
        None,
        lambda v: v is None or v >= 0,
        "must be >= 0 (fractions allowed; null: by runtime.workers_per_gpu)",
    )
    workers_per_gpu: int = checked(  # how many workers share one GPU when gpus_per_worker is None
        1, lambda v: v >= 1, "must be >= 1"
    )
    address: str | None = None  # "auto" or a cluster address; None: RAY_ADDRESS or a local Ray
    connect_timeout_s: float = checked(  # seconds for the Ray at runtime.address to answer
        15.0, lambda v: v > 0, "must be > 0"
    )
    state_memory_gb: float | None = checked(  # client states in memory beyond it spill to disk
        None,
        lambda v: v is None or v >= 0,
        "must be >= 0 (null: a quarter of the machine's memory)",
    )


@dataclass
class AlgorithmConfig:
    name: str = "fedavg"  # a built-in algorithm (fedsim keys lists them) or module:Class
    params: Any = None  # the algorithm's Params dataclass, filled by ``load_config``


@dataclass
class WandbConfig:
    """``tracking.wandb``: Weights & Biases logging (fedsim/tracking/wandb_sink.py)."""

    enabled: bool = False  # mirror the run to Weights & Biases
    project: str = checked(  # the W&B project
        "fedsim", lambda v: bool(v.strip()), "must be a non-empty string"
    )
    entity: str | None = None  # the W&B team or user; null: your default entity
    group: str | None = None  # runs of one sweep or comparison side by side
    tags: list[str] = checked(  # W&B run tags
        predicate=lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v),
        allowed="must be a list of strings",
        factory=list,
    )
    mode: str = checked(  # online | offline | disabled; online falls back to offline
        "online",
        lambda v: v in ("online", "offline", "disabled"),
        "allowed: online, offline, disabled",
    )
    max_client_series: int = checked(  # per-client accuracy curves for clients 0..N-1
        20, lambda v: v >= 0, "must be >= 0"
    )


@dataclass
class TrackingConfig:
    """``tracking``: where a run is mirrored besides its run folder."""

    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class ExperimentConfig:
    name: str = checked(  # the run folder's name: runs/<name>
        "experiment",
        is_run_name,
        "must be a folder name: no '/' or '\\', not starting with '.', at most 200 bytes",
    )
    seed: int = 0  # seeds the partition, the client sampling and the model's initial weights
    rounds: int = checked(20, lambda v: v >= 1, "must be >= 1")  # communication rounds
    join_ratio: float = checked(  # share of the clients sampled each round
        1.0, lambda v: 0 < v <= 1, "must be in (0, 1]"
    )
    eval_every: int = checked(  # evaluate every N rounds (and after the last)
        1, lambda v: v >= 1, "must be >= 1"
    )
    checkpoint_every: int = checked(  # save the full state every N rounds and after the last
        0, lambda v: v >= 0, "must be >= 0 (0: no checkpoints)"
    )
    max_failed_fraction: float = checked(  # stop if more of a cohort has non-finite losses
        0.5, lambda v: 0 <= v <= 1, "must be in [0, 1]"
    )
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    asynchronous: AsyncConfig = field(default_factory=AsyncConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (the resolved config.yaml); algorithm params inlined."""
        out = dataclasses.asdict(self)
        params = out["algorithm"].pop("params") or {}
        out["algorithm"].update(params)
        return out


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
            rule = field_check(cls, name)
            if rule is not None and not rule[0](kwargs[name]):
                raise ConfigError(key, kwargs[name], rule[1])
    return cls(**kwargs)


def config_from_dict(raw: dict[str, Any]) -> ExperimentConfig:
    """Validate a nested dict into an ExperimentConfig (algorithm params included)."""
    from fedsim.algorithms.registry import get_algorithm_class

    raw = dict(raw or {})
    raw.pop("tune", None)  # a search's options, read by `fedsim tune` (fedsim/search/)
    algo_raw = raw.pop("algorithm", None) or {}
    if not isinstance(algo_raw, dict):
        raise ConfigError("algorithm", algo_raw, "must be a mapping of keys")
    algo_raw = dict(algo_raw)
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


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read a YAML file (or start from defaults), apply overrides, validate."""
    raw = {} if path is None else read_yaml_mapping(path)
    return config_from_dict(apply_overrides(raw, overrides or []))
