"""Each client's validation split (``eval.validation_ratio``), carved from its training data.

A share of every client's train split, drawn by the seed from its own stream (the partition,
the train/test splits and every other draw stay as they were), becomes the client's ``val``
split: no algorithm trains on it, and every evaluation judges it with the same model at the
same moment as the test split, so a run can pick its best round on validation and report
that round's test numbers. Data whose samples overlap (character windows, packed token
windows: ``split_gap`` > 0) or that is kept in order (Shakespeare's roles) gives the end of
each train split instead, one contiguous block with ``split_gap`` samples dropped before it,
as its test split is cut: no token of a validation sample is in a training sample.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from fedsim.data.federated import ClientSplit, FederatedData
from fedsim.errors import ConfigError
from fedsim.streams import VALIDATION_TAG


def validation_size(num_train: int, ratio: float) -> int:
    """How many of ``num_train`` training samples go to validation: floor(ratio * n), at
    least one while a client has two or more, never the last one."""
    if num_train < 2:
        return 0
    return min(max(math.floor(ratio * num_train), 1), num_train - 1)


def carve_validation(data: FederatedData, ratio: float, seed: int) -> FederatedData:
    """``data`` with ``ratio`` of each client's train split moved to its ``val`` split
    (drawn by ``seed``; in order for ordered data); ``data`` itself when ``ratio`` is 0.
    Recorded in ``partition["validation"]``; raises ConfigError if a client is left with no
    training sample."""
    if ratio == 0:
        return data
    rng = np.random.default_rng([seed, VALIDATION_TAG])
    # a built federation's dataset no longer lists its clients: overlap alone decides
    ordered = data.dataset.natural_clients is not None or data.dataset.split_gap > 0
    gap = data.dataset.split_gap if ordered else 0
    carved = []
    for k, split in enumerate(data.everyone):
        n, n_val = len(split.train), validation_size(len(split.train), ratio)
        if ordered:
            keep = n - n_val - gap if n_val else n
            if keep < 1:
                raise ConfigError(
                    "eval.validation_ratio", ratio, f"leaves client {k} no training sample "
                    f"({n} in order: {n_val} validation, {gap} dropped before them so that "
                    "no token is in both); lower it",
                )  # fmt: skip
            ordered_train = np.sort(split.train)  # the client's text order
            train, val = ordered_train[:keep], ordered_train[n - n_val :]
        else:
            shuffled = rng.permutation(split.train)
            train, val = np.sort(shuffled[n_val:]), np.sort(shuffled[:n_val])
        carved.append(dataclasses.replace(split, train=train, val=val))
    clients, newcomers = carved[: data.num_clients], carved[data.num_clients :]
    partition = dict(data.partition)
    partition["validation"] = {
        "ratio": ratio,
        "seed": seed,
        "from": "each client's train split" + (", its end in order" if ordered else ""),
    }
    return dataclasses.replace(data, clients=clients, newcomers=newcomers, partition=partition)


__all__ = ["ClientSplit", "carve_validation", "validation_size"]
