"""How the FedAvg family weights its clients (``algorithm.weighting`` and FedVG's
validation keys): the keys ``fedsim/algorithms/aggregation_weights.py`` acts on.

A shared base, not an algorithm (it has no ``Params``): FedAvg, SCAFFOLD and FedDyn
subclass it (docs/algorithms.md, "The FedAvg family").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked
from fedsim.data.names import DATASET_NAMES
from fedsim.errors import ConfigError

WEIGHTINGS = ("samples", "uniform", "fedvg", "avg")
NORMS = ("1", "2", "spectral")
GRANULARITIES = ("model", "layer", "block")
SCORES = "with algorithm.weighting=fedvg|avg (FedVG's validation set and scores)"
VALIDATION_ONLY = ("val_ratio",)  # acts with val_holdout=true too


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
    # FedVG: share of each client's train split held out for the server
    val_ratio: float = checked(0.1, lambda v: 0 < v < 1, "must be in (0, 1)", group=SCORES)
    # hold val_ratio out of every client even when the weighting needs no scores, so that
    # samples/uniform runs train on exactly FedVG's data (FL-bench gives every method the
    # same train/val split). null: only when the weighting needs the validation set
    val_holdout: bool | None = checked(
        None, lambda v: v is None or isinstance(v, bool), "true, false or null", group=SCORES
    )
    val_dataset: str | None = checked(  # FedVG: validate on this dataset instead (server-only)
        None,
        lambda v: v is None or v in DATASET_NAMES,
        f"allowed: {', '.join(DATASET_NAMES)} (null: hold out val_ratio of every client)",
        group=SCORES,
    )
    val_imbalance: float | None = checked(  # FedVG: rho in (0, 1]; class c keeps a share rho^c
        None, lambda v: v is None or 0 < v <= 1, "must be in (0, 1] (null: none)", group=SCORES
    )
    val_samples: int | None = checked(  # FedVG: at most this many validation samples
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null)", group=SCORES
    )
    # FedVG: 1 | 2 | spectral (Any: YAML reads 1 as an int, spectral as a str)
    norm: Any = checked(1, lambda v: norm_name(v) in NORMS, "allowed: 1, 2, spectral", group=SCORES)
    granularity: str = checked(  # FedVG: model | layer | block
        "model", lambda v: v in GRANULARITIES, f"allowed: {', '.join(GRANULARITIES)}", group=SCORES
    )
    score_batch_size: int = checked(  # FedVG: validation batch (official 32; BatchNorm cares)
        32, lambda v: v >= 1, "must be >= 1", group=SCORES
    )
    eps: float = checked(  # FedVG: w ~ 1 / (s + eps)
        1e-8, lambda v: v > 0, "must be > 0", group=SCORES, schedulable=True
    )

    def __post_init__(self) -> None:
        self.norm = norm_name(self.norm)
        self._refuse_unused_scoring_keys()
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

    def _refuse_unused_scoring_keys(self) -> None:
        """A validation or score key set where no validation set is built acts on nothing."""
        if self.uses_scores:
            return
        for f in dataclasses.fields(WeightingParams):
            if f.name in ("weighting", "val_holdout"):
                continue
            if self.val_holdout and f.name in VALIDATION_ONLY:
                continue
            value = getattr(self, f.name)
            default = norm_name(f.default) if f.name == "norm" else f.default
            if value != default:
                raise ConfigError(
                    f"algorithm.{f.name}",
                    value,
                    "acts only with algorithm.weighting=fedvg|avg (or val_holdout=true for "
                    f"val_ratio), and this run has algorithm.weighting={self.weighting!r}",
                )

    @property
    def uses_scores(self) -> bool:
        """Whether this weighting needs FedVG's validation set and scores."""
        return self.weighting in ("fedvg", "avg")

    @property
    def builds_validation(self) -> bool:
        """Whether a validation set is built (and, without val_dataset, held out)."""
        return self.uses_scores or bool(self.val_holdout)
