"""Cluster-structured heterogeneity (SP-CACW's and IFCA's settings): `relabel`, `rotation`,
`clustered`.

Client k belongs to cluster k % C (clusters interleave, so any prefix of the clients covers
every cluster). `relabel` and `rotation` split the samples with a base partition (`base`: iid,
dirichlet, pathological) and then transform each client's samples, train and test alike:
a per-cluster label permutation, or a rotation of the images by the client's angle. Every
sample belongs to at most one client, so the transform is applied once, to a copy of the
dataset, when the federation is built; indices stay as they are. `clustered` is a partition:
each cluster draws a class distribution, each client draws its own around it (noise `sigma`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from fedsim.data.datasets import ImageDataset
from fedsim.data.partition import BASE_NAMES, check_partition_inputs, least_samples
from fedsim.errors import ConfigError
from fedsim.streams import CLUSTERED_TAG, RELABEL_TAG

HETEROGENEITY_NAMES = ("relabel", "rotation", "clustered")
# Clusters when data.partition.clusters is null (at most the clients); rotation without
# clusters is continuous.
DEFAULT_CLUSTERS: dict[str, int | None] = {"relabel": 4, "rotation": None, "clustered": 4}
ASSIGNMENT = "client k -> cluster k % clusters"
SIGMA_DEFINITION = (
    "cluster c draws q_c ~ Dirichlet(alpha * 1_K); client k of cluster c draws "
    "p_k ~ Dirichlet(q_c * K / sigma) (mean q_c, total concentration K / sigma): small sigma "
    "keeps p_k close to q_c, large sigma spreads clients away from it; client k then gets "
    "the share p_k[y] / sum_j p_j[y] of class y's samples (every sample is used)"
)
# Dirichlet concentrations are clipped here so extreme sigma neither underflows nor overflows.
_MIN_CONCENTRATION, _MAX_CONCENTRATION = 1e-3, 1e9


def check_settings(
    name: str, num_clients: int, clusters: int | None, step: float, base: str, sigma: float
) -> int | None:
    """Validate one setting's keys (one-line ConfigErrors); the number of clusters it uses."""
    if base not in BASE_NAMES:
        raise ConfigError("data.partition.base", base, f"allowed: {', '.join(BASE_NAMES)}")
    if clusters is None:
        default = DEFAULT_CLUSTERS[name]
        clusters = None if default is None else min(default, int(num_clients))
    else:
        if isinstance(clusters, bool) or not isinstance(clusters, int | np.integer):
            raise ConfigError("data.partition.clusters", clusters, "must be an integer")
        if clusters < 1:
            raise ConfigError("data.partition.clusters", clusters, "must be >= 1")
        if clusters > num_clients:
            raise ConfigError(
                "data.partition.clusters",
                clusters,
                f"at most data.num_clients={num_clients}: every cluster needs a client",
            )
    if name == "rotation" and (
        isinstance(step, bool) or not isinstance(step, int | float) or not math.isfinite(step)
    ):
        raise ConfigError("data.partition.step", step, "must be a finite number (degrees)")
    if name == "clustered" and not (isinstance(sigma, int | float) and sigma > 0):
        raise ConfigError("data.partition.sigma", sigma, "must be > 0")
    return None if clusters is None else int(clusters)


def client_clusters(num_clients: int, clusters: int) -> np.ndarray:
    """The cluster of every client: k % clusters."""
    return np.arange(num_clients, dtype=np.int64) % clusters


def label_permutations(num_classes: int, clusters: int, seed: int) -> np.ndarray:
    """(clusters, num_classes): row c maps a label y to perm[c, y]; row 0 is the identity.

    Seeded by `seed`; rows are redrawn (a few times) to differ from each other while
    num_classes! allows."""
    rng = np.random.default_rng([seed, RELABEL_TAG])
    perms = [np.arange(num_classes, dtype=np.int64)]
    for _ in range(1, clusters):
        for _attempt in range(100):
            perm = rng.permutation(num_classes).astype(np.int64)
            if not any(np.array_equal(perm, p) for p in perms):
                break
        perms.append(perm)
    return np.stack(perms)


def rotation_angles(num_clients: int, step: float, clusters: int | None) -> np.ndarray:
    """Degrees (counter-clockwise, in [0, 360)) of every client: k * step, or with clusters C
    (k % C) * 360 / C."""
    if clusters is not None:
        return client_clusters(num_clients, clusters) * (360.0 / clusters)
    step = math.fmod(float(step), 360.0)  # (k * step) mod 360 without overflow
    return np.array([(k * step) % 360.0 for k in range(num_clients)], dtype=np.float64)


def rotate_images(images: np.ndarray, angle: float) -> np.ndarray:
    """uint8 (N, C, H, W) rotated counter-clockwise by `angle` degrees: exact (np.rot90) for
    multiples of 90 on square images, else torchvision's bilinear rotate (corners filled
    with 0)."""
    angle = float(angle) % 360.0
    if angle == 0:
        return images.copy()
    if angle % 90 == 0 and images.shape[2] == images.shape[3]:
        return np.ascontiguousarray(np.rot90(images, k=int(angle // 90), axes=(2, 3)))
    import torch
    from torchvision.transforms.functional import InterpolationMode, rotate

    out = rotate(torch.from_numpy(np.ascontiguousarray(images)), angle, InterpolationMode.BILINEAR)
    return out.numpy()


def transform_federation(
    dataset: ImageDataset,
    client_indices: list[np.ndarray],
    name: str,
    clusters: int | None,
    step: float,
    seed: int,
) -> tuple[ImageDataset, dict[str, Any]]:
    """`relabel` or `rotation` applied to each client's samples (train and test): a new
    dataset (same indices) and what partition.json records."""
    num_clients = len(client_indices)
    info: dict[str, Any] = {}
    if name == "relabel":
        assert clusters is not None
        membership = client_clusters(num_clients, clusters)
        perms = label_permutations(dataset.num_classes, clusters, seed)
        labels = dataset.labels.copy()
        for k, idx in enumerate(client_indices):
            labels[idx] = perms[membership[k]][dataset.labels[idx]]
        info.update(
            clusters=clusters,
            assignment=ASSIGNMENT,
            client_clusters=membership.tolist(),
            permutations=perms.tolist(),
        )
        return replace(dataset, labels=labels), info
    angles = rotation_angles(num_clients, step, clusters)
    images = dataset.images.copy()
    for angle in np.unique(angles):
        if angle == 0:
            continue
        idx = np.concatenate([client_indices[k] for k in np.flatnonzero(angles == angle)])
        images[idx] = rotate_images(dataset.images[idx], angle)
    if clusters is None:
        info.update(step=float(step))
    else:
        membership = client_clusters(num_clients, clusters)
        info.update(clusters=clusters, assignment=ASSIGNMENT, client_clusters=membership.tolist())
    info["angles"] = angles.tolist()
    return replace(dataset, images=images), info


def partition_clustered(
    labels: np.ndarray,
    num_classes: int,
    num_clients: int,
    clusters: int,
    alpha: float,
    sigma: float,
    seed: int,
    max_tries: int = 100,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Per-client index arrays of the `clustered` setting (see SIGMA_DEFINITION) and what
    partition.json records. Redrawn until every client has min(40, N / clients / 2) samples
    (at least 2)."""
    labels = np.asarray(labels)
    check_partition_inputs(labels, num_classes, num_clients, seed)
    if not alpha > 0:
        raise ConfigError("data.partition.alpha", alpha, "must be > 0")
    rng = np.random.default_rng([seed, CLUSTERED_TAG])
    membership = client_clusters(num_clients, clusters)
    class_indices = [np.flatnonzero(labels == y) for y in range(num_classes)]
    min_size = max(2, least_samples(len(labels), num_clients))
    scale = min(num_classes / sigma, _MAX_CONCENTRATION)  # finite even for sigma ~ 1e-320
    for _ in range(max_tries):
        cluster_p = rng.dirichlet(np.full(num_classes, float(alpha)), size=clusters)
        concentration = np.clip(
            cluster_p[membership] * scale, _MIN_CONCENTRATION, _MAX_CONCENTRATION
        )
        client_p = np.stack([rng.dirichlet(c) for c in concentration])
        owner = np.empty(len(labels), dtype=np.int64)
        for y, idx_y in enumerate(class_indices):
            weights = client_p[:, y]
            if not weights.sum() > 0:
                weights = np.ones(num_clients)
            idx_y = rng.permutation(idx_y)
            cuts = (np.cumsum(weights / weights.sum()) * len(idx_y)).astype(int)[:-1]
            counts = np.diff(np.concatenate([[0], cuts, [len(idx_y)]]))
            owner[idx_y] = np.repeat(np.arange(num_clients), counts)
        sizes = np.bincount(owner, minlength=num_clients)
        if sizes.min() >= min_size:
            parts = [np.flatnonzero(owner == k).astype(np.int64) for k in range(num_clients)]
            info = {
                "clusters": clusters,
                "assignment": ASSIGNMENT,
                "client_clusters": membership.tolist(),
                "alpha": alpha,
                "sigma": sigma,
                "sigma_definition": SIGMA_DEFINITION,
                "cluster_distributions": np.round(cluster_p, 6).tolist(),
                "client_distributions": np.round(client_p, 6).tolist(),
            }
            return parts, info
    raise ConfigError(
        "data.num_clients",
        num_clients,
        f"{max_tries} clustered draws never gave every client >= {min_size} samples; "
        "use fewer clients or raise data.partition.alpha",
    )
