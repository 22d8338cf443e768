"""Keys of the FedAvg family: FedAvg, FedAvgM, FedProx, SCAFFOLD, FedDyn, Ditto, FedVG.

Every member averages what its clients upload with weights from ``algorithm.weighting``
(docs/algorithms.md, "The FedAvg family"); FedVG's validation-set keys belong to the
``fedvg`` and ``avg`` weightings. Torch-free, so checking a config stays fast.
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
PENALTIES = ("norm", "squared")
SCORES = "with algorithm.weighting=fedvg|avg (FedVG's validation set and scores)"
VALIDATION_ONLY = ("val_ratio",)  # acts with val_holdout=true too
SERVER_OPTIMIZERS = ("sgd", "adagrad", "yogi", "adam")
ADAPTIVE_DEFAULTS = {"beta1": 0.9, "beta2": 0.99, "tau": 1e-3}


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
        1e-8, lambda v: v > 0, "must be > 0", group=SCORES
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


@dataclass
class AdaptiveServerParams(AlgorithmParams):
    """The server optimizer's kind and its adaptive moments' keys (Reddi et al. 2021)."""

    server_optimizer: str = checked(  # sgd (FedAvg, FedAvgM) | adagrad | yogi | adam (FedOpt)
        "sgd", lambda v: v in SERVER_OPTIMIZERS, f"allowed: {', '.join(SERVER_OPTIMIZERS)}"
    )
    beta1: float = checked(  # adaptive server optimizers: first-moment decay
        0.9, lambda v: 0 <= v < 1, "must be in [0, 1)"
    )
    beta2: float = checked(  # yogi / adam: second-moment decay
        0.99, lambda v: 0 <= v < 1, "must be in [0, 1)"
    )
    tau: float = checked(  # adaptive server optimizers: adaptivity (the paper's epsilon)
        1e-3, lambda v: v > 0, "must be > 0"
    )

    def __post_init__(self) -> None:
        if self.server_optimizer == "sgd":
            for key in ("beta1", "beta2", "tau"):
                if getattr(self, key) != ADAPTIVE_DEFAULTS[key]:
                    raise ConfigError(
                        f"algorithm.{key}",
                        getattr(self, key),
                        "acts only with algorithm.server_optimizer=adagrad|yogi|adam, and this "
                        "run has algorithm.server_optimizer='sgd'",
                    )
        elif self.server_optimizer == "adagrad" and self.beta2 != ADAPTIVE_DEFAULTS["beta2"]:
            raise ConfigError(
                "algorithm.beta2", self.beta2, "adagrad has no second-moment decay (yogi, adam)"
            )


@dataclass
class FedAvgParams(AdaptiveServerParams, WeightingParams):
    """``algorithm.*`` keys of FedAvg: the aggregation weights and the server optimizer."""

    server_lr: float = checked(  # server step on the averaged client update (1: plain FedAvg)
        1.0, lambda v: v > 0, "must be > 0"
    )
    server_momentum: float = checked(  # server SGD momentum beta (FedAvgM; 0: none)
        0.0, lambda v: 0 <= v < 1, "must be in [0, 1)"
    )

    def __post_init__(self) -> None:
        WeightingParams.__post_init__(self)
        AdaptiveServerParams.__post_init__(self)
        if self.server_optimizer != "sgd" and self.server_momentum != 0:
            raise ConfigError(
                "algorithm.server_momentum",
                self.server_momentum,
                f"acts only with algorithm.server_optimizer=sgd, and this run has "
                f"algorithm.server_optimizer={self.server_optimizer!r} (beta1 is its momentum)",
            )


@dataclass
class FedAvgMParams(FedAvgParams):
    """``algorithm.*`` keys of FedAvgM: FedAvg's, with server momentum 0.9 by default."""

    server_momentum: float = 0.9


@dataclass
class FedVGParams(FedAvgParams):
    """``algorithm.*`` keys of FedVG: the FedAvg keys, FedVG weights by default."""

    weighting: str = "fedvg"


@dataclass
class FedProxParams(FedAvgParams):
    """``algorithm.*`` keys of FedProx: ``mu`` (required) and FedAvg's keys."""

    mu: float | None = checked(  # proximal strength: loss += (mu/2) ||w - w_global||^2; required
        None, lambda v: v is None or v >= 0, "must be >= 0 (0: plain FedAvg)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mu is None:
            raise ConfigError(
                "algorithm.mu", None, "required for fedprox: set algorithm.mu (0.01 is common)"
            )


@dataclass
class ScaffoldParams(AdaptiveServerParams, WeightingParams):
    """``algorithm.*`` keys of SCAFFOLD: the server step eta_g, the weighting keys and the
    server optimizer (its lr is ``global_lr``)."""

    weighting: str = "uniform"
    global_lr: float = checked(1.0, lambda v: v > 0, "must be > 0")  # server step eta_g

    def __post_init__(self) -> None:
        WeightingParams.__post_init__(self)
        AdaptiveServerParams.__post_init__(self)


@dataclass
class FedDynParams(WeightingParams):
    """``algorithm.*`` keys of FedDyn: alpha, the penalty form and the weighting keys."""

    weighting: str = "uniform"
    alpha: float = checked(0.01, lambda v: v > 0, "must be > 0")  # dynamic regularizer strength
    penalty: str = checked(  # norm (PFLlib) | squared (the FedDyn paper)
        "norm", lambda v: v in PENALTIES, "allowed: norm, squared"
    )


@dataclass
class DittoParams(FedAvgParams):
    """``algorithm.*`` keys of Ditto (and FedAvg's, for the global model)."""

    mu: float = checked(  # pull of the personal model towards the global model (Ditto's lambda)
        0.1, lambda v: v >= 0, "must be >= 0"
    )
    personal_epochs: int = checked(  # epochs of personal training per round (PFLlib plocal_epochs)
        1, lambda v: v >= 1, "must be >= 1"
    )
