"""Aggregation weights of the FedAvg family: one mechanism, consulted by every member.

FedAvg, FedProx, FedVG, SCAFFOLD, FedDyn, FedAvgM and Ditto all average what their clients
upload; only the weights differ. ``algorithm.weighting`` chooses them (ALGORITHMS.md, "FedVG"):

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedsim.algorithms.base import (
    AlgorithmParams,
    ClientInfo,
    ClientPlan,
    FederationInfo,
    WeightedSum,
)
from fedsim.checks import checked
from fedsim.data.datasets import DATASET_NAMES
from fedsim.errors import ConfigError

if TYPE_CHECKING:
    from fedsim.algorithms.fedvg import ValidationScorer
    from fedsim.data.datasets import ImageDataset
    from fedsim.data.federated import FederatedData

WEIGHTINGS = ("samples", "uniform", "fedvg", "avg")
NORMS = ("1", "2", "spectral")
GRANULARITIES = ("model", "layer", "block")


def norm_name(value: Any) -> Any:
    """``algorithm.norm`` as a name: YAML reads 1 as an int, spectral as a str."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if float(value) in (1.0, 2.0):
            return str(int(value))
    return value


@dataclass
class WeightingParams(AlgorithmParams):
    """``algorithm.*`` keys shared by the FedAvg family: how the server weights clients."""

    weighting: str = checked(  # samples | uniform | fedvg | avg
        "samples", lambda v: v in WEIGHTINGS, f"allowed: {', '.join(WEIGHTINGS)}"
    )
    val_ratio: float = checked(  # FedVG: share of each client's train split held out for the server
        0.1, lambda v: 0 < v < 1, "must be in (0, 1)"
    )
    # hold val_ratio out of every client even when the weighting needs no scores, so that
    # samples/uniform runs train on exactly FedVG's data (FL-bench gives every method the
    # same train/val split). null: only when the weighting needs the validation set
    val_holdout: bool | None = None
    val_dataset: str | None = checked(  # FedVG: validate on this dataset instead (server-only)
        None,
        lambda v: v is None or v in DATASET_NAMES,
        f"allowed: {', '.join(DATASET_NAMES)} (null: hold out val_ratio of every client)",
    )
    val_imbalance: float | None = checked(  # FedVG: rho in (0, 1]; class c keeps a share rho^c
        None, lambda v: v is None or 0 < v <= 1, "must be in (0, 1] (null: none)"
    )
    val_samples: int | None = checked(  # FedVG: at most this many validation samples
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null)"
    )
    norm: Any = checked(  # FedVG: 1 | 2 | spectral (Any: YAML reads 1 as an int, spectral as a str)
        1, lambda v: norm_name(v) in NORMS, "allowed: 1, 2, spectral"
    )
    granularity: str = checked(  # FedVG: model | layer | block
        "model", lambda v: v in GRANULARITIES, f"allowed: {', '.join(GRANULARITIES)}"
    )
    score_batch_size: int = checked(  # FedVG: validation batch (official 32; BatchNorm cares)
        32, lambda v: v >= 1, "must be >= 1"
    )
    eps: float = checked(1e-8, lambda v: v > 0, "must be > 0")  # FedVG: w ~ 1 / (s + eps)

    def __post_init__(self) -> None:
        self.norm = norm_name(self.norm)
        if self.val_holdout is False and self.uses_scores and self.val_dataset is None:
            raise ConfigError(
                "algorithm.val_holdout",
                False,
                f"weighting={self.weighting} needs a validation set: hold one out (null) or "
                "set algorithm.val_dataset",
            )
        if self.val_holdout and self.val_dataset is not None:
            raise ConfigError(
                "algorithm.val_holdout",
                True,
                "nothing is held out when algorithm.val_dataset is set; leave it null",
            )

    @property
    def uses_scores(self) -> bool:
        """Whether this weighting needs FedVG's validation set and scores."""
        return self.weighting in ("fedvg", "avg")

    @property
    def builds_validation(self) -> bool:
        """Whether a validation set is built (and, without val_dataset, held out)."""
        return self.uses_scores or bool(self.val_holdout)


def weighted_mean(total: WeightedSum | None) -> torch.Tensor | None:
    """sum w x / sum w as float32; None when nobody contributed."""
    if total is None or total.value is None or total.weight <= 0:
        return None
    return total.mean()


class AggregationWeights:
    """Worker side: what a client adds to the sums; driver side: the weighted mean."""

    def __init__(self, params: WeightingParams, federation: FederationInfo):
        self.params = params
        self.scorer: ValidationScorer | None = None
        if params.builds_validation:
            # fedvg.py defines FedVG on the FedAvg base, which imports this module
            from fedsim.algorithms.fedvg import ValidationScorer

            self.scorer = ValidationScorer(params, federation)

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
        out = {
            f"{key}/vg/{group}": (1.0 / (scores[group] + self.params.eps), part)
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
