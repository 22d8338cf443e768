"""Aggregation weights of the FedAvg family: one mechanism, consulted by every member.

FedAvg, FedProx, FedVG, SCAFFOLD, FedDyn, FedAvgM and Ditto all average what their clients
upload; only the weights differ. ``algorithm.weighting`` chooses them (docs/algorithms.md,
"FedAvg-family weighting"):

- ``samples``  w_k = n_k / sum n (FedAvg, FedProx, FedAvgM, Ditto);
- ``uniform``  w_k = 1 / |cohort| (SCAFFOLD's and FedDyn's mean, as PFLlib);
- ``fedvg``    w_k = (1/(s_k + eps)) / sum_j (1/(s_j + eps)), s_k the client model's
               gradient-norm score on a server validation set (FedVG; ``fedvg.py``);
- ``avg``      w_k = (w_k^fedvg + n_k / sum n) / 2 (FedVG's ``avg`` mode).

Every one of them is a weighted sum, so workers still reduce before they send: a client adds
``(1/(s_k + eps), theta_k)`` for FedVG, and the server divides by the summed weights, which
is exactly the normalization above. The score runs on the worker, right after the client
trains, through the worker's probe (where the data and the module already are).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from fedsim.algorithm_params.aggregation_weights import WeightingParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    FederationInfo,
    WeightedSum,
)

if TYPE_CHECKING:
    from fedsim.data.datasets import ImageDataset
    from fedsim.data.federated import FederatedData


class Scorer(Protocol):
    """What a score-based weighting consults (FedVG's ``ValidationScorer`` in ``fedvg.py``):
    the server-only data it needs, the samples each client trains on, a trained model's
    score per group of parameters, and how groups split and join a flat vector."""

    groups: list[str]

    def prepare_data(
        self, data: FederatedData, load_dataset: Callable[[str], ImageDataset], seed: int
    ) -> FederatedData: ...

    def train_indices(self, client: int) -> np.ndarray | None: ...

    def scores(self, probe: Any, params: torch.Tensor) -> dict[str, float]: ...

    def split(self, value: torch.Tensor) -> dict[str, torch.Tensor]: ...

    def join(self, parts: dict[str, torch.Tensor]) -> torch.Tensor: ...


# the scorer of the score-based weightings (fedvg, avg), registered by the module defining it
SCORERS: dict[str, Callable[[WeightingParams, FederationInfo], Scorer]] = {}


def register_scorer(name: str) -> Callable[[type], type]:
    """Class decorator: the scorer ``AggregationWeights`` builds for weighting ``name``."""

    def add(cls: type) -> type:
        SCORERS[name] = cls
        return cls

    return add


def weighted_mean(total: WeightedSum | None) -> torch.Tensor | None:
    """sum w x / sum w as float32; None when nobody contributed."""
    if total is None or total.value is None or total.weight <= 0:
        return None
    return total.mean()


class AggregationWeights:
    """Worker side: what a client adds to the sums; driver side: the weighted mean."""

    def __init__(self, params: WeightingParams, federation: FederationInfo):
        self.params = params
        self.scorer: Scorer | None = None
        if params.builds_validation:  # fedvg.py registers FedVG's scorer
            self.scorer = SCORERS["fedvg"](params, federation)

    def prepare_data(
        self, data: FederatedData, load_dataset: Callable[[str], ImageDataset], seed: int
    ) -> FederatedData:
        """Build the validation set when the weighting needs one (see ``fedvg.py``)."""
        return data if self.scorer is None else self.scorer.prepare_data(data, load_dataset, seed)

    def train_indices(self, client: int) -> np.ndarray | None:
        """What the client trains on: its split minus its held-out samples (None: all)."""
        return None if self.scorer is None else self.scorer.train_indices(client)

    def contribute(
        self, key: str, value: torch.Tensor, plan: ClientPlan, client: ClientInfo
    ) -> dict[str, tuple[float, torch.Tensor]]:
        """The weighted-sum entries a client adds for ``value``."""
        weighting = self.params.weighting
        n = float(client.num_train if plan.train_indices is None else len(plan.train_indices))
        if weighting == "samples":
            return {key: (n, value)}
        if weighting == "uniform":
            return {key: (1.0, value)}
        scorer = self.scorer
        assert scorer is not None  # built whenever the weighting uses scores
        if "fedvg_scores" not in plan.context:
            plan.context["fedvg_scores"] = scorer.scores(client.probe, value)
        scores = plan.context["fedvg_scores"]
        round_params = self.params if client.context is None else client.context.algorithm_params
        eps = round_params.eps  # the round's (it takes a schedule)
        out = {
            f"{key}/vg/{group}": (1.0 / (scores[group] + eps), part)
            for group, part in scorer.split(value).items()
        }
        if weighting == "avg":
            out[f"{key}/samples"] = (n, value)
        return out

    def mean(self, sums: dict[str, WeightedSum], key: str) -> torch.Tensor | None:
        """The weighted mean of what clients contributed under ``key`` (None: nobody did)."""
        weighting = self.params.weighting
        if weighting in ("samples", "uniform"):
            return weighted_mean(sums.get(key))
        scorer = self.scorer
        assert scorer is not None
        parts = {group: weighted_mean(sums.get(f"{key}/vg/{group}")) for group in scorer.groups}
        if any(part is None for part in parts.values()):
            return None
        out = scorer.join(parts)
        if weighting == "avg":
            samples = weighted_mean(sums.get(f"{key}/samples"))
            if samples is None:
                return None
            out = 0.5 * (out + samples)
        return out
