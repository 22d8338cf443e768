"""The plain sections of an experiment config: model, runtime and algorithm (its keys are
its Params, ``fedsim/algorithm_params/``); ``data``, ``client`` and ``tracking`` have a
module each (``data.py``, ``client.py``, ``tracking.py``), read here too by their old path.

Each range is declared on its field with ``checked`` (fedsim/checks.py), as ``fedsim keys``
shows; a field's line comment is its description there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedsim.checks import checked
from fedsim.config.client import ClientConfig
from fedsim.config.data import DataConfig, PartitionConfig
from fedsim.config.tracking import TrackingConfig, WandbConfig


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


@dataclass
class ModelConfig:
    name: str = checked(  # the network: a built-in (fedsim keys lists them) or module:Class
        "fedavg_cnn", _model_resolves, "a built-in name or module:Class"
    )
    # hidden layer sizes (mlp: [200, 200]; fedavg_cnn, fedavg_cnn_bn: one, [512]); null: the
    # model's default
    hidden: list[int] | None = checked(
        None,
        lambda v: (
            v is None
            or (
                isinstance(v, list)
                and len(v) > 0
                and all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in v)
            )
        ),
        "a non-empty list of integers >= 1 (or null: the model's default)",
    )
    # keyword arguments of the model's constructor (LightningCLI's init_args), e.g. a plain
    # LightningModule's own lr: {lr: 0.001}; recorded in config.yaml, searchable by fedsim tune
    args: dict = checked(
        predicate=lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and k.isidentifier() for k in v
        ),
        allowed="a mapping of constructor argument names to values, e.g. {lr: 0.001}",
        factory=dict,
    )  # fmt: skip


@dataclass
class RuntimeConfig:
    # auto (local unless Ray can win back its start-up: fedsim/runtime/executor_choice.py) |
    # ray (a pool of worker actors) | local (in this process); the numbers are the same
    executor: str = checked(
        "auto", lambda v: v in ("auto", "local", "ray"), "allowed: auto, local, ray"
    )
    device: str = checked(  # auto (CUDA where a GPU is visible) | cpu | cuda | cuda:N
        "auto",
        lambda v: v in ("auto", "cpu", "cuda") or (v.startswith("cuda:") and v[5:].isdigit()),
        "allowed: auto, cpu, cuda, cuda:N",
    )
    # Ray pool size; None: fill the machine (one per CPU, or workers_per_gpu per GPU). Only
    # with executor=ray or auto (which it makes Ray): the local executor runs one worker in
    # this process (set: an error).
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


__all__ = [
    "AlgorithmConfig", "ClientConfig", "DataConfig", "ModelConfig", "PartitionConfig",
    "RuntimeConfig", "TrackingConfig", "WandbConfig", "is_run_name",
]  # fmt: skip
