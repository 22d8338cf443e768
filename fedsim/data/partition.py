"""Split sample indices among clients: IID, Dirichlet (PFLlib `dir`), pathological (`pat`).

Every function returns one sorted int64 index array per client; a sample goes to at most one
client (IID and Dirichlet assign every sample).
"""

from __future__ import annotations

import numpy as np

from fedsim.errors import ConfigError

PARTITION_NAMES = ("iid", "dirichlet", "pathological")
BASE_NAMES = PARTITION_NAMES  # the splits `relabel` and `rotation` start from (data.partition.base)

# PFLlib's least_samples = min(batch_size / (1 - train_ratio), N / clients / 2) with its
# defaults batch_size 10, train_ratio 0.75 -> min(40, N / clients / 2).
_PFLLIB_LEAST_SAMPLES = 40


def least_samples(num_samples: int, num_clients: int) -> int:
    """PFLlib's minimum client size: int(min(40, N / num_clients / 2))."""
    return int(min(_PFLLIB_LEAST_SAMPLES, num_samples / num_clients / 2))


def _finish(parts: list[np.ndarray] | list[list[int]]) -> list[np.ndarray]:
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def partition_iid(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Shuffle all samples and cut them into `num_clients` near-equal parts."""
    order = rng.permutation(len(labels)).astype(np.int64)
    return _finish(np.array_split(order, num_clients))


def partition_dirichlet(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    min_size: int | None = None,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """PFLlib's `dir` rule: per class, Dir(alpha) proportions over clients.

    A client already holding >= N / num_clients samples gets no more. The whole partition is
    redrawn until every client has at least `min_size` samples (default `least_samples`).
    """
    labels = np.asarray(labels)
    num_samples = len(labels)
    if min_size is None:
        min_size = least_samples(num_samples, num_clients)
    class_indices = [np.flatnonzero(labels == k) for k in np.unique(labels)]
    fair_share = num_samples / num_clients
    owner = np.empty(num_samples, dtype=np.int64)  # client of each sample in this draw
    for _ in range(max_tries):
        sizes = np.zeros(num_clients, dtype=np.int64)
        for idx_k in class_indices:
            idx_k = rng.permutation(idx_k)
            proportions = rng.dirichlet(np.full(num_clients, alpha))
            open_clients = sizes < fair_share
            proportions = proportions * open_clients
            if proportions.sum() <= 0:  # tiny alpha put all mass on full clients: spread evenly
                proportions = open_clients.astype(float)
            cuts = (np.cumsum(proportions / proportions.sum()) * len(idx_k)).astype(int)[:-1]
            chunk_sizes = np.diff(np.concatenate([[0], cuts, [len(idx_k)]]))
            owner[idx_k] = np.repeat(np.arange(num_clients), chunk_sizes)
            sizes += chunk_sizes
        if sizes.min() >= min_size:
            return _finish([np.flatnonzero(owner == client) for client in range(num_clients)])
    raise ConfigError(
        "data.partition.alpha",
        alpha,
        f"{max_tries} Dirichlet draws never gave all {num_clients} clients >= {min_size} "
        "samples; raise alpha or lower data.num_clients",
    )


def pathological_classes(client: int, classes_per_client: int, num_classes: int) -> list[int]:
    """Classes of `client`: {(client * k + j) % K : j < k}."""
    return [(client * classes_per_client + j) % num_classes for j in range(classes_per_client)]


def partition_pathological(
    labels: np.ndarray,
    num_clients: int,
    classes_per_client: int,
    num_classes: int,
    rng: np.random.Generator,
    balance: bool = False,
) -> list[np.ndarray]:
    """PFLlib's `pat` rule: each client holds exactly `classes_per_client` (k) distinct classes.

    Client c gets classes {(c*k + j) % K : j < k}. When k divides K and num_clients * k is a
    multiple of K these are PFLlib's class groups up to client order (PFLlib gives a group to
    consecutive clients; here clients c, c + K/k, c + 2K/k, ... share it). Unlike PFLlib's
    greedy rule it gives every client exactly k classes also when num_clients * k is not a
    multiple of K, where PFLlib can leave clients short. Each class is split among its
    holders with PFLlib's unbalanced counts (`balance=True`: equal counts); every holder gets at
    least one sample of each of its classes. Classes nobody holds stay unassigned.
    """
    labels = np.asarray(labels)
    least = least_samples(len(labels), num_clients)
    holders: list[list[int]] = [[] for _ in range(num_classes)]
    for client in range(num_clients):
        for k in pathological_classes(client, classes_per_client, num_classes):
            holders[k].append(client)
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for k, class_holders in enumerate(holders):
        if not class_holders:
            continue
        idx_k = rng.permutation(np.flatnonzero(labels == k))
        n_holders, size = len(class_holders), len(idx_k)
        if size < n_holders:
            raise ConfigError(
                "data.num_clients",
                num_clients,
                f"class {k} has {size} samples but {n_holders} clients must hold it; "
                "use fewer clients or fewer data.partition.classes_per_client",
            )
        per = size / n_holders
        low, high = max(1, int(max(per / 10, least / num_classes))), int(per)
        if balance or low >= high:
            counts = [int(per)] * (n_holders - 1)
        else:
            counts = rng.integers(low, high, n_holders - 1).tolist()
        counts.append(size - sum(counts))
        start = 0
        for client, count in zip(class_holders, counts, strict=True):
            parts[client].extend(idx_k[start : start + count].tolist())
            start += count
    return _finish(parts)


def check_seed(seed: int) -> None:
    """ConfigError unless `seed` is a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ConfigError("seed", seed, "a non-negative integer")


def check_partition_inputs(
    labels: np.ndarray, num_classes: int, num_clients: int, seed: int
) -> None:
    """ConfigError for a bad seed or client count; ValueError for labels outside 0..K-1."""
    check_seed(seed)
    if (
        isinstance(num_clients, bool)
        or not isinstance(num_clients, int | np.integer)
        or not 1 <= num_clients <= len(labels)
    ):
        raise ConfigError(
            "data.num_clients", num_clients, f"an integer from 1 to the {len(labels)} samples"
        )
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in 0..{num_classes - 1}")


def partition_labels(
    labels: np.ndarray,
    num_classes: int,
    num_clients: int,
    scheme: str,
    *,
    alpha: float = 0.1,
    classes_per_client: int = 2,
    seed: int = 0,
) -> list[np.ndarray]:
    """Validate the partition settings and dispatch to the scheme, seeded by `seed`."""
    labels = np.asarray(labels)
    check_seed(seed)
    if scheme not in PARTITION_NAMES:
        raise ConfigError("data.partition.name", scheme, f"allowed: {', '.join(PARTITION_NAMES)}")
    check_partition_inputs(labels, num_classes, num_clients, seed)
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        return partition_iid(labels, int(num_clients), rng)
    if scheme == "dirichlet":
        if not alpha > 0:
            raise ConfigError("data.partition.alpha", alpha, "must be > 0")
        return partition_dirichlet(labels, int(num_clients), float(alpha), rng)
    if not isinstance(classes_per_client, int | np.integer) or not (
        1 <= classes_per_client <= num_classes
    ):
        raise ConfigError(
            "data.partition.classes_per_client",
            classes_per_client,
            f"an integer from 1 to num_classes={num_classes}",
        )
    return partition_pathological(
        labels, int(num_clients), int(classes_per_client), num_classes, rng
    )
