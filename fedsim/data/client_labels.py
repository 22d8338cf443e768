"""Clients that differ by more than their data: each client's own label ids
(``data.permute_labels``) and natural clients chosen by their column's value
(``data.partition.values``).

``data.permute_labels=true`` maps every label y of client k's samples, train and test, to
perm_k[y], perm_k a permutation drawn from ``(seed, tag, tag, k)`` (the partition's client id, so
a held-out client has one too): the task is the same everywhere, its label ids are personal,
and a shared head cannot serve two clients at once (the setting where a personal head must
win). Every sample belongs to at most one client, so the labels are rewritten once, in a copy.
"""

from __future__ import annotations

import dataclasses
import fnmatch

import numpy as np

from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError
from fedsim.streams import PERMUTE_LABELS_TAG


def client_permutation(num_classes: int, seed: int, client: int) -> np.ndarray:
    """Client ``client``'s map of label ids: y -> perm[y]."""
    rng = np.random.default_rng([seed, PERMUTE_LABELS_TAG, PERMUTE_LABELS_TAG, client])
    return rng.permutation(num_classes).astype(np.int64)


def permute_labels(data: FederatedData, seed: int) -> FederatedData:
    """``data`` with each client's labels permuted by its own ``client_permutation``;
    partition.json's ``label_permutations`` records every map (client id -> list)."""
    dataset = data.dataset
    next_token = bool(getattr(dataset, "next_token", False))
    if next_token or dataset.num_classes < 2:
        raise ConfigError(
            "data.permute_labels", True, f"needs classes to permute, and {dataset.name} has "
            f"{'next-token targets' if next_token else 'one class'}: use a classifier "
            "(e.g. model.name=sequence_classifier with data.label_column)",
        )  # fmt: skip
    labels = dataset.labels.copy()
    maps: list[list[int]] = []
    for client, split in enumerate(data.everyone):
        perm = client_permutation(dataset.num_classes, seed, client)
        rows = split.all
        labels[rows] = perm[dataset.labels[rows]]
        maps.append(perm.tolist())
    partition = {**data.partition, "label_permutations": maps}
    return dataclasses.replace(
        data, dataset=dataclasses.replace(dataset, labels=labels), partition=partition
    )


def matching(
    values: np.ndarray, patterns: list[str] | None, key: str = "data.partition.values"
) -> np.ndarray:
    """Which of ``values`` (strings) match one of the shell ``patterns`` (all when None);
    ConfigError naming ``key`` when none does."""
    if patterns is None:
        return np.ones(len(values), dtype=bool)
    keep = np.array([any(fnmatch.fnmatchcase(str(v), p) for p in patterns) for v in values])
    if len(values) and not keep.any():
        shown = ", ".join(sorted(map(str, values))[:6])
        raise ConfigError(
            key, patterns, f"matches none of the values ({shown}...): shell patterns such "
            "as en-* over data.partition.by's column",
        )  # fmt: skip
    return keep
