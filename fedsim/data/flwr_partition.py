"""``data.partition.name=flwr:<Partitioner>``: one of flwr-datasets' partitioners by name with
its arguments (``data.partition.args``), so a Flower paper's partition is reproduced exactly.

The partitioner sees a table of the dataset's labels (its ``partition_by`` column, default
the label column) and a row index; each partition's row indices become a client's samples.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from fedsim.errors import ConfigError

FLWR_PREFIX = "flwr:"
_INDEX = "__fedsim_index__"


def is_flwr_partition(name: str) -> bool:
    """Whether ``data.partition.name`` names a flwr-datasets partitioner."""
    return name.startswith(FLWR_PREFIX) and len(name) > len(FLWR_PREFIX)


def _partitioner_class(name: str) -> type:
    try:
        from flwr_datasets import partitioner as partitioners
    except ImportError:
        raise ConfigError(
            "data.partition.name", name, "needs flwr-datasets: pip install 'fedsim-pfl[flwr]'"
        ) from None
    base = partitioners.Partitioner
    known = sorted(
        n for n, c in vars(partitioners).items()
        if isinstance(c, type) and issubclass(c, base) and c is not base
    )  # fmt: skip
    cls = getattr(partitioners, name[len(FLWR_PREFIX) :], None)
    if name[len(FLWR_PREFIX) :] not in known or cls is None:
        raise ConfigError("data.partition.name", name, "allowed: flwr:" + ", flwr:".join(known))
    return cls


def partition_flwr(
    labels: np.ndarray,
    name: str,
    num_clients: int,
    args: dict[str, Any],
    label_column: str,
    seed: int,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """One sorted int64 index array per client, as flwr-datasets' partitioner ``name`` (e.g.
    ``flwr:DirichletPartitioner``) built with ``args`` splits the labels, and the arguments
    it was built with. ``num_partitions`` is ``data.num_clients``, ``partition_by`` the label
    column, ``seed`` the run's unless ``args`` sets one. Raises ConfigError."""
    import datasets

    cls = _partitioner_class(name)
    params = inspect.signature(cls.__init__).parameters
    kwargs = dict(args)
    for key in kwargs:
        if key not in params or key == "self":
            allowed = ", ".join(p for p in params if p not in ("self", "num_partitions"))
            raise ConfigError(f"data.partition.args.{key}", kwargs[key], f"allowed: {allowed}")
    if "num_partitions" in kwargs:
        raise ConfigError(
            "data.partition.args.num_partitions", kwargs["num_partitions"],
            "is data.num_clients; set that instead",
        )  # fmt: skip
    if "num_partitions" in params:
        kwargs["num_partitions"] = num_clients
    if "seed" in params:
        kwargs.setdefault("seed", seed)
    column = kwargs.setdefault("partition_by", label_column) if "partition_by" in params else None
    if column is not None and column != label_column:
        raise ConfigError(
            "data.partition.args.partition_by", column,
            f"fedsim's partitions split by the label column; use {label_column}",
        )  # fmt: skip
    table = datasets.Dataset.from_dict(
        {label_column: np.asarray(labels).tolist(), _INDEX: np.arange(len(labels)).tolist()}
    )
    try:
        partitioner = cls(**kwargs)
        partitioner.dataset = table
        parts = [
            np.sort(np.asarray(partitioner.load_partition(i)[_INDEX], dtype=np.int64))
            for i in range(partitioner.num_partitions)
        ]
    except (ValueError, TypeError, KeyError) as error:
        message = " ".join(str(error).split())[:200]
        raise ConfigError(
            "data.partition.name", name, f"flwr-datasets refused: {message}"
        ) from None
    if len(parts) != num_clients:
        raise ConfigError(
            "data.num_clients", num_clients, f"{name} made {len(parts)} partitions; use that"
        )
    return parts, kwargs
