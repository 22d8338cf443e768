"""Pieces shared by the clustered baselines (Oracle, IFCA, FC): per-cluster means, the
clients-by-rounds assignment figure, the adjusted Rand index against the true clusters, and
IFCA's cluster estimate (the model with the lowest loss on a client's train split), which IFCA
and FC's newcomers use.

Pure numpy / torch; no algorithm of its own (``registry`` never sees it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.aggregation_weights import weighted_mean
from fedsim.algorithms.base import FederationInfo, WeightedSum
from fedsim.figures import Figure, Panel


def cluster_key(cluster: int) -> str:
    """The weighted-sum key of cluster ``cluster``'s uploads."""
    return f"cluster_{cluster}"


def cluster_means(models: torch.Tensor, sums: dict[str, WeightedSum]) -> torch.Tensor:
    """Each cluster model replaced by the weighted mean of its uploads; kept where none came."""
    out = models.clone()
    for k in range(models.shape[0]):
        mean = weighted_mean(sums.get(cluster_key(k)))
        if mean is not None:
            out[k] = mean
    return out


def mean_train_losses(probe: Any, models: torch.Tensor) -> list[float]:
    """Mean cross-entropy of every model (rows of ``models``) on the client's train split."""
    losses = []
    for model in models:
        result = probe.evaluate(model, probe.train_indices)
        losses.append(result.loss_sum / max(result.num_samples, 1))
    return losses


def lowest_loss_cluster(probe: Any, models: torch.Tensor) -> int:
    """IFCA's cluster estimate: the row of ``models`` with the lowest mean train loss on the
    probe's client (ties: the first, the smaller id)."""
    return int(np.argmin(mean_train_losses(probe, models)))


def adjusted_rand_index(a: np.ndarray, b: np.ndarray) -> float:
    """Hubert-Arabie adjusted Rand index of two labelings (1: identical up to renaming)."""
    a, b = np.asarray(a), np.asarray(b)
    _, a_ids = np.unique(a, return_inverse=True)
    _, b_ids = np.unique(b, return_inverse=True)
    table = np.zeros((a_ids.max() + 1, b_ids.max() + 1), dtype=np.int64)
    np.add.at(table, (a_ids, b_ids), 1)

    def pairs(x: np.ndarray) -> float:
        return float((x * (x - 1) // 2).sum())

    index = pairs(table)
    rows, cols, total = pairs(table.sum(axis=1)), pairs(table.sum(axis=0)), math.comb(len(a), 2)
    expected = rows * cols / total if total else 0.0
    best = 0.5 * (rows + cols)
    if best == expected:  # both labelings trivial (one cluster, or all singletons)
        return 1.0
    return (index - expected) / (best - expected)


def assignment_figure(
    filename: str,
    history: np.ndarray,
    federation: FederationInfo,
    title: str,
    panel_title: str = "cluster per round (-1: not sampled)",
) -> Figure:
    """Clients-by-rounds heatmap of cluster ids (-1: not sampled that round), beside the true
    clusters when the partition has them; the title adds the ARI of the latest assignment."""
    values = (
        history.T.astype(np.float64) if len(history) else np.full((federation.num_clients, 1), -1.0)
    )
    panels = [Panel(values, panel_title, "round", "client")]
    truth = federation.client_clusters
    if truth is not None:
        panels.append(
            Panel(np.asarray(truth, dtype=np.float64)[:, None], "true cluster", "", "client")
        )
        latest = latest_assignment(history, federation.num_clients)
        seen = latest >= 0
        if seen.sum() >= 2:
            ari = adjusted_rand_index(latest[seen], np.asarray(truth)[seen])
            title = f"{title}; ARI vs true clusters = {ari:.3f}"
    return Figure(filename, title, tuple(panels))


def latest_assignment(history: np.ndarray, num_clients: int) -> np.ndarray:
    """Per client, its cluster in the last round it was sampled (-1: never)."""
    out = np.full(num_clients, -1, dtype=np.int64)
    for row in history:
        out = np.where(row >= 0, row, out)
    return out
