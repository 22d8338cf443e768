"""FedDisco: FedAvg with weights adjusted by each client's label-distribution discrepancy.

Ye et al., ICML 2023; official code MediaBrain-SJTU/FedDisco (``main.py``,
``get_distribution_difference``, ``disco_weight_adjusting``). Over the round's cohort:

    d_k = KL(p_k || uniform) = sum_j p_kj log(p_kj K)   (0 log 0 = 0),  d_k <- d_k / sum d
    w_k = ReLU(n_k / sum n - a d_k + b) / sum ReLU(...),   a = ``disco_a``, b = ``disco_b``

(d stays 0 when every d_k is 0); when every unclipped weight is <= 0, w_k = n_k / sum n.

Why individual uploads, not worker-reduced sums: w_k depends on the cohort's sums of n and d
through a ReLU, and a client does not know the cohort (the seam gives it none). Without the
ReLU, three reduced sums (n_k theta_k, d_k theta_k, theta_k) would be exact; with it, the
clipped clients' models must be subtracted, which needs them. So every sampled client uploads
its trained model and the server computes the exact weights from the cohort's class counts
(``FederationInfo.class_counts``, which FedDisco clients send to the server anyway).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.feddisco import FedDiscoParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register
from fedsim.sizes import nbytes


def discrepancies(class_counts: np.ndarray) -> np.ndarray:
    """KL(p_k || uniform) per row of (clients, K) counts, normalized to sum 1 (0s if all 0)."""
    counts = np.asarray(class_counts, dtype=np.float64)
    p = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    num_classes = counts.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p * num_classes), 0.0)
    d = terms.sum(axis=1)
    total = d.sum()
    return d / total if total > 0 else np.zeros_like(d)


def disco_weights(sizes: np.ndarray, class_counts: np.ndarray, a: float, b: float) -> np.ndarray:
    """FedDisco's cohort weights (sum 1): ReLU(n/sum n - a d + b) normalized; n/sum n if all
    of them are <= 0."""
    n = np.asarray(sizes, dtype=np.float64)
    share = n / n.sum()
    raw = share - a * discrepancies(class_counts) + b
    if not (raw > 0).any():
        return share
    clipped = np.maximum(raw, 0.0)
    return clipped / clipped.sum()


@register
class FedDisco(Algorithm):
    """The global model; the server weights uploads by size and label discrepancy."""

    name = "feddisco"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Ye et al. 2023: "
        "FedAvg's one global model (the weights only change how it is made)",
    )
    Params = FedDiscoParams

    def weights(self, cohort: list[int], params: FedDiscoParams) -> np.ndarray:
        """The weights of ``cohort`` (client ids), in that order."""
        return disco_weights(
            self.federation.train_sizes[cohort],
            self.federation.class_counts[cohort],
            params.disco_a,
            params.disco_b,
        )

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        cohort = sorted(individual)
        if not cohort:
            return state
        total = torch.zeros_like(state["params"], dtype=torch.float64)
        weights = self.weights(cohort, context.algorithm_params)  # the round's a and b
        for weight, client in zip(weights.tolist(), cohort, strict=True):
            total += weight * individual[client]["params"].to(torch.float64)
        return {**state, "params": total.to(torch.float32)}

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        return ClientPlan(train_params=broadcast["params"])

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate(individual={"params": trained})

    def upload_nbytes(self, update: ClientUpdate) -> int:
        """The trained model and the client's K class counts (int64), as FedDisco sends."""
        return nbytes(update.individual) + 8 * self.federation.num_classes
