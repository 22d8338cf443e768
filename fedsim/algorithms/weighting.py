"""Aggregation weights for the FedAvg family: one mechanism, consulted by every member.

FedAvg, FedProx, SCAFFOLD, FedDyn and FedAvgM all average what their clients upload; only
the weights differ. ``algorithm.weighting`` chooses them (ALGORITHMS.md, "FedVG"):

- ``samples``  w_k = n_k / sum n (FedAvg, FedProx, FedAvgM);
- ``uniform``  w_k = 1 / |cohort| (SCAFFOLD's and FedDyn's mean, as PFLlib);
- ``fedvg``    w_k = (1/(s_k + eps)) / sum_j (1/(s_j + eps)), s_k the client model's
               gradient-norm score on a server validation set (FedVG; seed 003);
- ``avg``      w_k = (w_k^fedvg + n_k / sum n) / 2 (FedVG's ``avg`` mode).

Every one of them is a weighted sum, so workers still reduce before they send: a client adds
``(1/(s_k + eps), theta_k)`` for FedVG, and the server divides by the summed weights, which
is exactly the normalization above. The score runs on the worker, right after the client
trains, through the worker's probe (where the data and the module already are).

Scores (the official code, alinadevkota/FedVG ``src/server/fedgrad.py``): the client's
model in train mode, cross-entropy with ``reduction="sum"`` on the validation set in batches
of 32 (no shuffle), gradients summed over batches and divided by the number of batches;
s = sum over parameter tensors of ||g_tensor|| (p = 1 by default; 2; ``spectral``: the
largest singular value of the tensor reshaped to (rows, -1), the 2-norm for vectors).
Granularity: ``model`` (one weight per client), ``layer`` (one per parameter tensor, its own
norm), ``block`` (one per named model block, the sum of its tensors' norms).

The validation set: by default ``val_ratio`` of every client's training split, held out
(the client trains on the rest) and united; or ``val_dataset``, another dataset carried to
the workers as server-only samples. ``val_imbalance`` = rho makes it long-tailed as the
official code does (class c keeps a share rho^c of half the set); ``val_samples`` caps it.
``val_holdout=true`` holds the same share out of the clients under ``samples``/``uniform``
too, so a baseline trains on exactly FedVG's data (FL-bench's protocol: one split for all).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import (
    AlgorithmParams,
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientUpdate,
    FederationInfo,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.fedavg import FedAvg
from fedsim.data.datasets import DATASET_NAMES, ImageDataset
from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError
from lightning_modules.flat_params import ParamLayout

WEIGHTINGS = ("samples", "uniform", "fedvg", "avg")
NORMS = ("1", "2", "spectral")
GRANULARITIES = ("model", "layer", "block")


@dataclass
class WeightingParams(AlgorithmParams):
    """``algorithm.*`` keys shared by the FedAvg family: how the server weights clients."""

    weighting: str = "samples"  # samples | uniform | fedvg | avg
    val_ratio: float = 0.1  # FedVG: share of each client's train split held out for the server
    # hold val_ratio out of every client even when the weighting needs no scores, so that
    # samples/uniform runs train on exactly FedVG's data (FL-bench gives every method the
    # same train/val split). null: only when the weighting needs the validation set
    val_holdout: bool | None = None
    val_dataset: str | None = None  # FedVG: validate on this dataset instead (server-only)
    val_imbalance: float | None = None  # FedVG: rho in (0, 1]; class c keeps a share rho^c
    val_samples: int | None = None  # FedVG: at most this many validation samples
    norm: Any = 1  # FedVG: 1 | 2 | spectral (Any: YAML reads 1 as an int, spectral as a str)
    granularity: str = "model"  # FedVG: model | layer | block
    score_batch_size: int = 32  # FedVG: validation batch (official 32; matters with BatchNorm)
    eps: float = 1e-8  # FedVG: w ~ 1 / (s + eps)

    def __post_init__(self) -> None:
        if self.weighting not in WEIGHTINGS:
            raise ConfigError(
                "algorithm.weighting", self.weighting, f"allowed: {_names(WEIGHTINGS)}"
            )
        if isinstance(self.norm, (int, float)) and not isinstance(self.norm, bool):
            if float(self.norm) in (1.0, 2.0):
                self.norm = str(int(self.norm))
        if self.norm not in NORMS:
            raise ConfigError("algorithm.norm", self.norm, "allowed: 1, 2, spectral")
        if self.granularity not in GRANULARITIES:
            raise ConfigError(
                "algorithm.granularity", self.granularity, f"allowed: {_names(GRANULARITIES)}"
            )
        if not 0 < self.val_ratio < 1:
            raise ConfigError("algorithm.val_ratio", self.val_ratio, "must be in (0, 1)")
        if self.val_dataset is not None and self.val_dataset not in DATASET_NAMES:
            raise ConfigError(
                "algorithm.val_dataset",
                self.val_dataset,
                f"allowed: {_names(DATASET_NAMES)} (null: hold out val_ratio of every client)",
            )
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
        if self.val_imbalance is not None and not 0 < self.val_imbalance <= 1:
            raise ConfigError(
                "algorithm.val_imbalance", self.val_imbalance, "must be in (0, 1] (null: none)"
            )
        if self.val_samples is not None and self.val_samples < 1:
            raise ConfigError("algorithm.val_samples", self.val_samples, "must be >= 1 (or null)")
        if self.score_batch_size < 1:
            raise ConfigError("algorithm.score_batch_size", self.score_batch_size, "must be >= 1")
        if not self.eps > 0:
            raise ConfigError("algorithm.eps", self.eps, "must be > 0")

    @property
    def uses_scores(self) -> bool:
        """Whether this weighting needs FedVG's validation set and scores."""
        return self.weighting in ("fedvg", "avg")

    @property
    def builds_validation(self) -> bool:
        """Whether a validation set is built (and, without val_dataset, held out)."""
        return self.uses_scores or bool(self.val_holdout)


def _names(values: tuple[str, ...]) -> str:
    return ", ".join(values)


# ----------------------------------------------------------------- FedVG scores (pure)


def validation_gradient(
    probe: ClientProbe, params: torch.Tensor, indices: np.ndarray, batch_size: int = 32
) -> torch.Tensor:
    """Official FedVG gradient: per batch (no shuffle) the gradient of the summed CE loss,
    added over batches and divided by the number of batches (flat, like ``params``)."""
    n = len(indices)
    if n == 0:
        raise ValueError("FedVG: the validation set is empty")
    total: torch.Tensor | None = None
    for start in range(0, n, batch_size):
        chunk = indices[start : start + batch_size]
        grad, _ = probe.gradient(params, chunk)  # of the mean loss over the chunk
        term = grad.to(torch.float64) * len(chunk)
        total = term if total is None else total.add_(term)
    assert total is not None
    return total / math.ceil(n / batch_size)


def tensor_norm(grad: torch.Tensor, norm: str) -> float:
    """||grad||_1, ||grad||_2 (of the flattened tensor) or its largest singular value."""
    g = grad.to(torch.float64)
    if norm == "1":
        return float(torch.linalg.vector_norm(g, 1))
    if norm == "2" or g.dim() < 2:
        return float(torch.linalg.vector_norm(g, 2))
    return float(torch.linalg.matrix_norm(g.reshape(g.shape[0], -1), ord=2))


def tensor_norms(grad: torch.Tensor, layout: ParamLayout, norm: str) -> dict[str, float]:
    """The norm of every tensor of a flat gradient, by name."""
    return {e.name: tensor_norm(layout.view(grad, e.name), norm) for e in layout.entries}


def inverse_weights(scores: list[float], eps: float = 1e-8) -> list[float]:
    """FedVG's normalized weights: (1/(s_k + eps)) / sum_j (1/(s_j + eps))."""
    inverse = [1.0 / (s + eps) for s in scores]
    total = sum(inverse)
    return [v / total for v in inverse]


def score_groups(granularity: str, federation: FederationInfo) -> dict[str, list[str]]:
    """Which tensors share one weight: all (model), each (layer), or each named block."""
    names = [e.name for e in federation.layout.entries]
    if granularity == "model":
        return {"model": names}
    if granularity == "layer":
        return {name: [name] for name in names}
    groups = {b: list(federation.block_parameters[b]) for b in federation.block_names}
    covered = {n for members in groups.values() for n in members}
    rest = [n for n in names if n not in covered]
    if rest:
        groups["(rest)"] = rest
    return groups


# ----------------------------------------------------------------- validation set


def imbalanced_subset(
    indices: np.ndarray, labels: np.ndarray, rho: float, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """The official long tail: half as many samples, class c a share rho^c (sorted result)."""
    proportions = rho ** np.arange(num_classes, dtype=np.float64)
    proportions /= proportions.sum()
    counts = (proportions * (len(indices) // 2)).astype(int)
    picked = []
    for c, count in enumerate(counts):
        members = indices[labels[indices] == c]
        count = min(int(count), len(members))
        if count:
            picked.append(rng.choice(members, size=count, replace=False))
    return np.sort(np.concatenate(picked)) if picked else indices[:0]


@dataclass
class ValidationSplit:
    """The server's validation samples (indices into the workers' dataset) and, when held
    out of the clients, what each client trains on instead."""

    indices: np.ndarray
    train_subsets: dict[int, np.ndarray]


def build_validation(
    params: WeightingParams,
    data: FederatedData,
    load_dataset: Callable[[str], ImageDataset],
    seed: int,
) -> tuple[FederatedData, ValidationSplit]:
    """FedVG's validation set (see the module docstring); the data the workers then get."""
    rng = np.random.default_rng([seed, 0xFED, 0x56])
    subsets: dict[int, np.ndarray] = {}
    total_train = int(sum(len(c.train) for c in data.clients))
    if params.val_dataset is None:
        held = []
        for client, split in enumerate(data.clients):
            n = len(split.train)
            n_val = min(math.floor(params.val_ratio * n), max(n - 1, 0))
            picked = np.sort(rng.choice(split.train, size=n_val, replace=False))
            subsets[client] = np.setdiff1d(split.train, picked, assume_unique=True)
            held.append(picked)
        pool = np.sort(np.concatenate(held))
        labels = data.dataset.labels
    else:
        try:
            external = load_dataset(params.val_dataset)
        except ConfigError as err:
            raise ConfigError("algorithm.val_dataset", params.val_dataset, err.allowed) from None
        size = min(len(external), max(1, round(params.val_ratio * total_train)))
        chosen = np.sort(rng.choice(len(external), size=size, replace=False))
        try:
            data, pool = data.with_server_samples(external, chosen)
        except ValueError as err:
            raise ConfigError("algorithm.val_dataset", params.val_dataset, str(err)) from None
        labels = data.dataset.labels
    if params.val_imbalance is not None:
        pool = imbalanced_subset(pool, labels, params.val_imbalance, data.num_classes, rng)
    if params.val_samples is not None and params.val_samples < len(pool):
        pool = np.sort(rng.choice(pool, size=params.val_samples, replace=False))
    if len(pool) == 0:
        raise ConfigError(
            "algorithm.val_ratio", params.val_ratio, "leaves no validation samples; raise it"
        )
    return data, ValidationSplit(indices=pool.astype(np.int64), train_subsets=subsets)


# ----------------------------------------------------------------- the strategy


class AggregationWeighting:
    """Worker side: what a client adds to the sums; driver side: the weighted mean."""

    def __init__(self, params: WeightingParams, federation: FederationInfo):
        self.params = params
        self.layout = federation.layout
        self.groups = score_groups(params.granularity, federation)
        self.validation: ValidationSplit | None = None

    def prepare_data(
        self, data: FederatedData, load_dataset: Callable[[str], ImageDataset], seed: int
    ) -> FederatedData:
        """Build the validation set when the weighting needs one."""
        if not self.params.builds_validation:
            return data
        data, self.validation = build_validation(self.params, data, load_dataset, seed)
        return data

    def train_indices(self, client: int) -> np.ndarray | None:
        """What the client trains on: its split minus its held-out samples (None: all)."""
        return None if self.validation is None else self.validation.train_subsets.get(client)

    def scores(self, probe: ClientProbe | None, params: torch.Tensor) -> dict[str, float]:
        """s per group for a client model: the sum of its tensors' validation-gradient norms."""
        if probe is None or self.validation is None:
            raise RuntimeError("FedVG scores need the worker's probe and a validation set")
        grad = validation_gradient(
            probe, params, self.validation.indices, self.params.score_batch_size
        )
        norms = tensor_norms(grad, self.layout, self.params.norm)
        return {g: sum(norms[n] for n in names) for g, names in self.groups.items()}

    def contribute(
        self,
        key: str,
        value: torch.Tensor,
        plan: ClientPlan,
        client: ClientInfo,
        scored: torch.Tensor | None = None,
    ) -> dict[str, tuple[float, torch.Tensor]]:
        """The weighted-sum entries for ``value``; FedVG scores ``scored`` (default: value)."""
        weighting = self.params.weighting
        n = float(client.num_train if plan.train_indices is None else len(plan.train_indices))
        if weighting == "samples":
            return {key: (n, value)}
        if weighting == "uniform":
            return {key: (1.0, value)}
        if "fedvg_scores" not in plan.context:
            model = value if scored is None else scored
            plan.context["fedvg_scores"] = self.scores(client.probe, model)
        scores = plan.context["fedvg_scores"]
        out = {
            f"{key}/vg/{g}": (1.0 / (scores[g] + self.params.eps), self._part(value, names))
            for g, names in self.groups.items()
        }
        if weighting == "avg":
            out[f"{key}/samples"] = (n, value)
        return out

    def mean(self, sums: dict[str, WeightedSum], key: str) -> torch.Tensor | None:
        """The weighted mean of what clients contributed under ``key`` (None: nobody did)."""
        weighting = self.params.weighting
        if weighting in ("samples", "uniform"):
            return _mean(sums.get(key))
        out = torch.empty(self.layout.total, dtype=torch.float32)
        for g, names in self.groups.items():
            part = _mean(sums.get(f"{key}/vg/{g}"))
            if part is None:
                return None
            offset = 0
            for name in names:
                size = self.layout.by_name[name].numel
                out[self.layout.slice_of(name)] = part[offset : offset + size]
                offset += size
        if weighting == "avg":
            samples = _mean(sums.get(f"{key}/samples"))
            if samples is None:
                return None
            out = 0.5 * (out + samples)
        return out

    def _part(self, value: torch.Tensor, names: list[str]) -> torch.Tensor:
        if len(names) == len(self.layout.entries):
            return value
        return torch.cat([value[self.layout.slice_of(n)] for n in names])


def _mean(total: WeightedSum | None) -> torch.Tensor | None:
    if total is None or total.value is None or total.weight <= 0:
        return None
    return (total.value / total.weight).to(torch.float32)


# ----------------------------------------------------------------- the FedAvg family


class WeightedFedAvg(FedAvg):
    """FedAvg whose aggregation weights come from ``algorithm.weighting``.

    The base of FedVG, FedProx, SCAFFOLD, FedDyn and FedAvgM: each overrides only what
    differs (client terms, server update) and asks ``self.weighting`` for its mean.
    """

    Params = WeightingParams

    def __init__(self, params: WeightingParams, federation: FederationInfo):
        super().__init__(params, federation)
        self.weighting = AggregationWeighting(params, federation)

    def prepare_data(
        self, data: FederatedData, load_dataset: Callable[[str], ImageDataset], seed: int
    ) -> FederatedData:
        return self.weighting.prepare_data(data, load_dataset, seed)

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        return ClientPlan(
            train_params=broadcast["params"],
            train_indices=self.weighting.train_indices(client.client),
        )

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate(sums=self.weighting.contribute("params", trained, plan, client))

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        round_idx: int,
    ) -> ServerState:
        mean = self.weighting.mean(sums, "params")
        if mean is None:
            return state  # nobody finished this round: keep the model
        return {**state, "params": mean}


class NamedViews:
    """Views of a flat vector by parameter name, moved once to the device training runs on
    (client terms hold CPU tensors; a GPU worker's parameters live on the GPU)."""

    def __init__(self, flat: torch.Tensor, layout: ParamLayout):
        self.flat, self.layout = flat, layout
        self._device: torch.device | None = None
        self._views: dict[str, torch.Tensor] = {}

    def on(self, device: torch.device) -> dict[str, torch.Tensor]:
        if self._device != device:
            moved = self.flat.to(device)
            self._views = {e.name: self.layout.view(moved, e.name) for e in self.layout.entries}
            self._device = device
        return self._views
