"""Federated view of one in-memory dataset: per-client train/test index arrays."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsim.data.datasets import Dataset
from fedsim.errors import ConfigError
from fedsim.streams import MAX_SAMPLES_TAG

SPLITS = ("train", "test", "val", "all")


@dataclass(frozen=True)
class ClientSplit:
    """One client's data: int64 indices into the shared dataset (``val``: its validation
    split, carved from its training data by ``eval.validation_ratio``; empty without)."""

    train: np.ndarray
    test: np.ndarray
    val: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    @property
    def all(self) -> np.ndarray:
        """Train, test and validation indices together."""
        return np.concatenate([self.train, self.test, self.val])


@dataclass
class FederatedData:
    """The dataset (held once) and each client's index split; `partition` records how."""

    dataset: Dataset
    clients: list[ClientSplit]
    partition: dict[str, Any] = field(default_factory=dict)
    server_samples: int = 0  # samples at the end of `dataset` that no client holds
    # held-out clients (eval.holdout_clients): they never train; client ids num_clients..
    newcomers: list[ClientSplit] = field(default_factory=list)

    def with_server_samples(
        self, extra: Dataset, indices: np.ndarray | None = None
    ) -> tuple[FederatedData, np.ndarray]:
        """A copy whose dataset also holds ``extra`` (or its ``indices``) at the end, owned by no
        client, and those samples' indices: how server-only data (a public validation set)
        reaches the workers, which hold one dataset. Raises ValueError if shapes or classes
        do not fit."""
        ds = self.dataset
        chosen = np.arange(len(extra)) if indices is None else np.asarray(indices, dtype=np.int64)
        if len(chosen) and int(extra.labels[chosen].max()) >= ds.num_classes:
            raise ValueError(
                f"{extra.name} has labels up to {int(extra.labels[chosen].max())}, "
                f"but {ds.name} has only {ds.num_classes} classes"
            )
        merged = ds.concat(extra.subset(chosen))
        added = np.arange(len(ds), len(ds) + len(chosen), dtype=np.int64)
        total = self.server_samples + len(chosen)
        partition = dict(self.partition)
        return FederatedData(merged, self.clients, partition, total, self.newcomers), added

    @property
    def num_clients(self) -> int:
        """Number of clients of the federation (the held-out ones not counted)."""
        return len(self.clients)

    @property
    def everyone(self) -> list[ClientSplit]:
        """Every client's split: the federation's, then the held-out ones (ids in order)."""
        return [*self.clients, *self.newcomers]

    def split(self, client: int) -> ClientSplit:
        """Client ``client``'s split (a held-out client's from ``num_clients`` on)."""
        return (
            self.clients[client]
            if client < len(self.clients)
            else self.newcomers[client - len(self.clients)]
        )

    @property
    def num_classes(self) -> int:
        """Number of classes of the dataset."""
        return self.dataset.num_classes

    def train_sizes(self, newcomers: bool = False) -> np.ndarray:
        """Training samples per client, shape (num_clients,) (``newcomers``: held-out clients
        after them)."""
        clients = self.everyone if newcomers else self.clients
        return np.array([len(c.train) for c in clients], dtype=np.int64)

    def test_sizes(self, newcomers: bool = False) -> np.ndarray:
        """Test samples per client, shape (num_clients,) (``newcomers``: held-out after)."""
        clients = self.everyone if newcomers else self.clients
        return np.array([len(c.test) for c in clients], dtype=np.int64)

    def class_counts(self, split: str = "train", newcomers: bool = False) -> np.ndarray:
        """Samples per client and class, shape (num_clients, num_classes); split train/test/val/all
        (``newcomers``: held-out clients' rows after them)."""
        if split not in SPLITS:
            raise ValueError(f"split={split!r}: allowed: {', '.join(SPLITS)}")
        labels, k = self.dataset.labels, self.num_classes
        clients = self.everyone if newcomers else self.clients
        counts = np.zeros((len(clients), k), dtype=np.int64)
        for i, client in enumerate(clients):
            indices = client.all if split == "all" else getattr(client, split)
            counts[i] = np.bincount(labels[indices], minlength=k)
        return counts

    def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``indices`` as model inputs and int64 labels: the dataset decides how
        (images: float32 normalized with mean = std = 0.5; text: int64 token windows)."""
        return self.dataset.batch(indices)

    def partition_summary(self) -> dict[str, Any]:
        """JSON-ready per-client sizes and class counts plus summary statistics."""
        train_counts = self.class_counts("train", newcomers=True)
        test_counts = self.class_counts("test", newcomers=True)
        train, test = self.train_sizes(newcomers=True), self.test_sizes(newcomers=True)
        val_counts = self.class_counts("val", newcomers=True)
        classes_held = ((train_counts + test_counts + val_counts) > 0).sum(axis=1)
        validated = any(len(c.val) for c in self.everyone)  # eval.validation_ratio > 0
        clients = [
            {
                "client": i,
                "train": int(train[i]),
                "test": int(test[i]),
                "train_class_counts": train_counts[i].tolist(),
                "test_class_counts": test_counts[i].tolist(),
                **({"val": int(val_counts[i].sum()),
                    "val_class_counts": val_counts[i].tolist()} if validated else {}),
                **({"held_out": True} if i >= self.num_clients else {}),
            }
            for i in range(len(train))
        ]  # fmt: skip

        def stat(values: np.ndarray, reduce: Any) -> float:
            return float(reduce(values)) if len(values) else 0.0

        stats = {
            "train_total": int(train.sum()),
            "test_total": int(test.sum()),
            "train_min": int(stat(train, np.min)),
            "train_max": int(stat(train, np.max)),
            "train_mean": stat(train, np.mean),
            "train_std": stat(train, np.std),
            "test_min": int(stat(test, np.min)),
            "test_max": int(stat(test, np.max)),
            "test_mean": stat(test, np.mean),
            "classes_per_client_mean": stat(classes_held, np.mean),
            "classes_per_client_min": int(stat(classes_held, np.min)),
            "classes_per_client_max": int(stat(classes_held, np.max)),
        }
        return {
            "dataset": self.dataset.name,
            "num_clients": len(train),  # held-out clients included (ids num_clients..)
            **({"held_out": list(range(self.num_clients, len(train)))} if self.newcomers else {}),
            "num_classes": self.num_classes,
            "num_samples": len(self.dataset.labels) - self.server_samples,
            "server_samples": self.server_samples,
            "partition": dict(self.partition),
            "clients": clients,
            "stats": stats,
        }


def split_train_test(
    indices: np.ndarray, train_ratio: float, rng: np.random.Generator
) -> ClientSplit:
    """Shuffle one client's indices and split like sklearn's train_test_split(train_size=r).

    train = floor(r * n), test = the rest (= ceil((1 - r) * n)); a client with >= 2 samples
    keeps at least one for each side, a single sample goes to train.
    """
    shuffled = rng.permutation(np.asarray(indices, dtype=np.int64))
    n = len(shuffled)
    n_train = math.floor(train_ratio * n)
    n_train = min(max(n_train, 1), n - 1) if n >= 2 else n
    return ClientSplit(train=np.sort(shuffled[:n_train]), test=np.sort(shuffled[n_train:]))


def stratified_subset(dataset: Dataset, max_samples: int | None) -> Dataset:
    """``data.max_samples``: about ``max_samples`` samples, each class keeping its share
    (rounded), drawn before partitioning; the dataset itself when None or not smaller.

    Drawn from a fixed stream, not the run's seed: every seed of an experiment sees the same
    subset, as it sees the same full dataset, and seeds vary the partition and training only.
    """
    if max_samples is None or max_samples >= len(dataset):
        return dataset
    if dataset.natural_clients is not None:
        raise ConfigError(
            "data.max_samples",
            max_samples,
            f"does not apply to {dataset.name}, whose clients come with the data; "
            "use data.num_clients and data.min_samples (or null)",
        )
    rng = np.random.default_rng([0, MAX_SAMPLES_TAG])
    keep = []
    for c in range(dataset.num_classes):
        members = np.flatnonzero(dataset.labels == c)
        share = round(max_samples * len(members) / len(dataset))
        keep.append(rng.choice(members, size=share, replace=False))
    return dataset.subset(np.sort(np.concatenate(keep)))
