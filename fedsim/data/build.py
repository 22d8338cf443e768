"""Building a federation: a dataset partitioned over clients (or the clients it comes with),
each client's samples split into train and test -> ``FederatedData``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedsim.data.client_labels import matching
from fedsim.data.dataset_types import Dataset, NaturalClient
from fedsim.data.federated import ClientSplit, FederatedData, split_train_test
from fedsim.data.flwr_partition import is_flwr_partition, partition_flwr
from fedsim.data.heterogeneity import (
    HETEROGENEITY_NAMES,
    check_settings,
    partition_clustered,
    transform_federation,
)
from fedsim.data.min_samples import min_samples_hint, sample_unit
from fedsim.data.partition import PARTITION_NAMES, check_partition_inputs, partition_labels
from fedsim.errors import ConfigError
from fedsim.streams import SPLIT_TAG

ALL_PARTITION_NAMES = PARTITION_NAMES + HETEROGENEITY_NAMES  # data.partition.name
NATURAL = "natural"  # one client per value of data.partition.by (hf: datasets)


def build_group_federation(
    dataset: Dataset,
    groups: np.ndarray,
    num_clients: int,
    min_samples: int,
    train_ratio: float,
    seed: int,
    by: str,
    train_rows: int | None = None,
    patterns: list[str] | None = None,
    max_client_samples: int | None = None,
) -> FederatedData:
    """One client per value of ``groups`` (``data.partition.by``: FEMNIST's writer_id): the
    ``num_clients`` largest with >= ``min_samples`` samples (ties: first seen first), each
    split into train and test like a partition's (``split_train_test``, ``train_ratio``), or,
    with ``train_rows`` (``data.test_split``), by the data's own splits: rows from
    ``train_rows`` on are the test split's, and a client needs rows in both. The dataset
    keeps the chosen clients' samples only (when every row is kept it is used as it is, so a
    memory-mapped cache stays mapped)."""
    values, first, inverse, counts = np.unique(
        groups.astype(str), return_index=True, return_inverse=True, return_counts=True
    )
    test_row = None if train_rows is None else np.arange(len(groups)) >= train_rows
    enough = (counts >= min_samples) & matching(values, patterns)
    if test_row is not None:  # a train and a test row each
        tests = np.bincount(inverse, weights=test_row, minlength=len(values))
        enough &= (tests >= 1) & (counts - tests >= 1)
    eligible = np.flatnonzero(enough)
    if num_clients > len(eligible):
        both = "" if test_row is None else " in both splits"
        raise ConfigError(
            "data.num_clients",
            num_clients,
            f"data.partition.by={by} has {len(eligible)} values with >= {min_samples} "
            f"{sample_unit(dataset)}{both} (of {len(values)}); use at most {len(eligible)} or "
            "lower data.min_samples"
            + min_samples_hint(counts if test_row is None else np.where(
                (tests >= 1) & (counts - tests >= 1), counts, 0), num_clients, dataset),
        )  # fmt: skip
    chosen = eligible[np.lexsort((first[eligible], -counts[eligible]))[:num_clients]]
    # data.max_client_samples: a client's first samples (the data's row order)
    members = [np.flatnonzero(inverse == k)[:max_client_samples] for k in chosen]
    keep = np.concatenate(members) if members else np.zeros(0, np.int64)
    position = np.arange(len(groups), dtype=np.int64)
    if len(keep) < len(groups):
        position[keep] = np.arange(len(keep))
    if test_row is None:
        split_rng = np.random.default_rng([seed, SPLIT_TAG])
        clients = [split_train_test(position[m], train_ratio, split_rng) for m in members]
    else:
        clients = [ClientSplit(train=position[m[~test_row[m]]], test=position[m[test_row[m]]])
                   for m in members]  # fmt: skip
    split: dict[str, Any] = {"seed": seed, "train_ratio": train_ratio}
    if test_row is not None:
        split = {"test_split": "the data's own (data.test_split)"}
    info: dict[str, Any] = {
        "name": NATURAL, "by": by, **split,
        "min_samples": min_samples, "clients_available": len(eligible),
        "clients": [{"client": i, by: str(values[k]), "samples": len(members[i])}
                    for i, k in enumerate(chosen)],
    }  # fmt: skip
    if patterns is not None:
        info["values"] = list(patterns)
    if max_client_samples is not None:
        info["max_client_samples"] = max_client_samples
    kept = dataset if len(keep) == len(groups) else dataset.subset(keep)
    return FederatedData(dataset=kept, clients=clients, partition=info)


def build_natural_federation(
    dataset: Dataset,
    num_clients: int,
    min_samples: int,
    max_client_samples: int | None = None,
    train_fraction: float = 0.8,
    plays: int | None = None,
) -> FederatedData:
    """The clients the data comes with (``dataset.natural_clients``: Shakespeare's roles).

    A client keeps its samples in order; the first ``train_fraction`` of them train, the
    rest test, with ``dataset.split_gap`` samples dropped in between so that no test input
    overlaps a train target. Clients with fewer than ``min_samples`` samples (train + test)
    are left out; of the rest, the ``num_clients`` largest are taken (ties: the data's
    order), so the choice is deterministic. ``max_client_samples`` then keeps each chosen
    client's first that many samples (a contiguous stretch of its text) before the split: a
    CPU-sized federation of the same clients. The partition keys do not apply.

    ``plays`` (Shakespeare): the clients come from that many plays instead (``roles_of_plays``),
    and each client's play is its true cluster (``client_clusters``, as a partition's).
    """
    natural = dataset.natural_clients
    assert natural is not None
    gap = dataset.split_gap
    usable = np.array([max(len(c.indices) - gap, 0) for c in natural], dtype=np.int64)
    eligible = np.flatnonzero(usable >= min_samples)
    if num_clients > len(eligible):
        raise ConfigError(
            "data.num_clients",
            num_clients,
            f"{dataset.name} has {len(eligible)} clients with >= {min_samples} "
            f"{sample_unit(dataset)} (data.min_samples); use at most {len(eligible)} or lower "
            "data.min_samples" + min_samples_hint(usable, num_clients, dataset),
        )
    clusters: list[int] | None = None
    if plays is None:
        chosen = eligible[np.argsort(-usable[eligible], kind="stable")[:num_clients]]
    else:
        chosen, clusters = roles_of_plays(natural, eligible, usable, plays, num_clients)
    parts, clients, records, offset = [], [], [], 0
    for rank, k in enumerate(chosen):
        indices, kept = natural[k].indices, int(usable[k])
        if max_client_samples is not None and kept > max_client_samples:
            kept = max_client_samples
            indices = indices[: kept + gap]
        n_train = math.floor(train_fraction * kept)
        train, test = indices[:n_train], indices[n_train + gap :]
        parts += [train, test]
        clients.append(
            ClientSplit(
                train=np.arange(offset, offset + len(train), dtype=np.int64),
                test=np.arange(
                    offset + len(train), offset + len(train) + len(test), dtype=np.int64
                ),
            )
        )
        offset += len(train) + len(test)
        records.append(
            {"client": rank, **natural[k].info, "samples": kept,
             "train": len(train), "test": len(test)}
        )  # fmt: skip
    subset = dataset.subset(np.concatenate(parts) if parts else np.zeros(0, np.int64))
    info: dict[str, Any] = {
        "name": "natural",
        "clients_available": len(eligible),
        "min_samples": min_samples,
        "max_client_samples": max_client_samples,
        "train_fraction": train_fraction,
        "split": f"in order, {gap} samples dropped between train and test",
        "clients": records,
    }
    if clusters is not None:
        info["plays"] = plays
        info["client_clusters"] = clusters
    return FederatedData(dataset=subset, clients=clients, partition=info)


def roles_of_plays(
    natural: tuple[NaturalClient, ...],
    eligible: np.ndarray,
    usable: np.ndarray,
    plays: int,
    num_clients: int,
) -> tuple[np.ndarray, list[int]]:
    """``num_clients`` roles of ``plays`` plays, and each one's play (0 .. plays - 1).

    The plays with the most eligible roles are taken (ties: more samples, then the data's
    order); their roles are dealt in turn, each play's largest first: client k comes from
    play k % plays while every play has roles left (the clusters interleave, as a
    partition's do).
    """
    by_play: dict[Any, list[int]] = {}
    for k in eligible:
        by_play.setdefault(natural[k].info.get("play"), []).append(int(k))
    if plays > len(by_play):
        raise ConfigError(
            "data.plays", plays, f"{len(by_play)} plays have eligible roles; use at most that"
        )
    ranked = sorted(by_play.values(), key=lambda roles: (-len(roles), -int(usable[roles].sum())))
    queues = [sorted(roles, key=lambda k: -int(usable[k])) for roles in ranked[:plays]]
    available = sum(len(q) for q in queues)
    if num_clients > available:
        raise ConfigError(
            "data.num_clients",
            num_clients,
            f"the {plays} plays taken (data.plays) have {available} eligible roles; use at "
            "most that, or more plays",
        )
    chosen: list[int] = []
    clusters: list[int] = []
    for depth in range(max(len(q) for q in queues)):
        for play, queue in enumerate(queues):
            if depth < len(queue) and len(chosen) < num_clients:
                chosen.append(queue[depth])
                clusters.append(play)
    return np.asarray(chosen, dtype=np.int64), clusters


def build_federated_data(
    dataset: Dataset,
    num_clients: int,
    partition: str,
    *,
    alpha: float = 0.1,
    classes_per_client: int = 2,
    train_ratio: float = 0.75,
    seed: int = 0,
    clusters: int | None = None,
    step: float = 4.0,
    base: str = "iid",
    sigma: float = 1.0,
    min_samples: int = 64,
    max_client_samples: int | None = None,
    plays: int | None = None,
    groups: np.ndarray | None = None,
    by: str | None = None,
    flwr_args: dict[str, Any] | None = None,
    label_column: str = "label",
    train_rows: int | None = None,
    values: list[str] | None = None,
) -> FederatedData:
    """Partition `dataset` among clients, then split each client's samples into train/test.

    A dataset that comes with its clients (``natural_clients``: Shakespeare) is not
    partitioned: see ``build_natural_federation`` (``min_samples``, ``max_client_samples`` and
    ``plays`` apply to it only).

    Same seed, same partition and splits. Clients hold index arrays only; the images stay in
    one array. `relabel` / `rotation` (fedsim/data/heterogeneity.py) split with `base` and then
    permute the labels / rotate the images of each client's samples in a copy of the dataset;
    `clustered` draws per-cluster class distributions (`clusters`, `alpha`, `sigma`).
    `natural` makes one client per value of `groups` (the `by` column of an hf: dataset;
    `train_rows`: rows from there on are the data's own test split, kept per client;
    `values`: only the values matching one of these shell patterns; `max_client_samples`:
    each client's first that many samples);
    `flwr:<Partitioner>` is flwr-datasets' partitioner with `flwr_args` (flwr_partition.py).
    """
    if dataset.natural_clients is not None:
        return build_natural_federation(
            dataset, num_clients, min_samples, max_client_samples, plays=plays
        )
    for key, value, instead in (
        ("data.max_client_samples", None if partition == NATURAL else max_client_samples,
         "use data.max_samples"),
        ("data.plays", plays, "leave it null"),
    ):
        if value is not None:
            raise ConfigError(
                key,
                value,
                f"applies to datasets that come with their clients (shakespeare, natural), not "
                f"{dataset.name}; {instead}",
            )
    if not 0 < train_ratio < 1:
        raise ConfigError("data.train_ratio", train_ratio, "must lie strictly between 0 and 1")
    if partition == NATURAL:
        if groups is None or by is None:
            raise ConfigError(
                "data.partition.name", partition, "needs data.partition.by, a column of an "
                "hf: dataset (shakespeare comes with its clients already)",
            )  # fmt: skip
        return build_group_federation(
            dataset, groups, num_clients, min_samples, train_ratio, seed, by, train_rows, values,
            max_client_samples,
        )  # fmt: skip
    if is_flwr_partition(partition):
        parts, used = partition_flwr(
            dataset.labels, partition, num_clients, flwr_args or {}, label_column, seed
        )
        split_rng = np.random.default_rng([seed, SPLIT_TAG])
        clients = [split_train_test(part, train_ratio, split_rng) for part in parts]
        info = {"name": partition, "args": used, "seed": seed, "train_ratio": train_ratio}
        return FederatedData(dataset=dataset, clients=clients, partition=info)
    if partition not in ALL_PARTITION_NAMES:
        raise ConfigError(
            "data.partition.name", partition, f"allowed: {', '.join(ALL_PARTITION_NAMES)}"
        )
    extra: dict[str, Any] = {}
    scheme = partition
    if partition in HETEROGENEITY_NAMES:
        check_partition_inputs(dataset.labels, dataset.num_classes, num_clients, seed)
        clusters = check_settings(partition, num_clients, clusters, step, base, sigma)
        scheme = base if partition != "clustered" else partition
    if partition == "clustered":
        assert clusters is not None
        parts, extra = partition_clustered(
            dataset.labels, dataset.num_classes, num_clients, clusters, alpha, sigma, seed
        )
    else:
        parts = partition_labels(
            dataset.labels,
            dataset.num_classes,
            num_clients,
            scheme,
            alpha=alpha,
            classes_per_client=classes_per_client,
            seed=seed,
        )
    # An independent stream from the partition's, so splits do not shift the partition.
    split_rng = np.random.default_rng([seed, SPLIT_TAG])
    clients = [split_train_test(part, train_ratio, split_rng) for part in parts]
    info: dict[str, Any] = {"name": partition, "seed": seed, "train_ratio": train_ratio}
    if partition in ("relabel", "rotation"):
        info["base"] = base
    if scheme == "dirichlet":
        info["alpha"] = alpha
    elif scheme == "pathological":
        info["classes_per_client"] = classes_per_client
    if partition in ("relabel", "rotation"):
        dataset, extra = transform_federation(
            dataset, [c.all for c in clients], partition, clusters, step, seed
        )
    info.update(extra)
    return FederatedData(dataset=dataset, clients=clients, partition=info)
