"""FedVG: gradient-guided aggregation (Devkota et al., CVPR 2026, arXiv 2602.21399; seed 003).

Official code alinadevkota/FedVG (FL-bench; ``src/server/fedgrad*.py``). Rules:
docs/algorithms.md, "fedvg". The server scores every uploaded model k by how flat the
cross-entropy is at it on a server validation set, s_k = sum_l ||g_{k,l}||_p, and averages
with w_k = (1/(s_k + eps)) / sum_j (1/(s_j + eps)): flatter (smaller gradient) weighs more.
Clients train exactly as in FedAvg.

``fedvg`` is FedAvg with ``algorithm.weighting=fedvg``; every FedAvg-family algorithm takes
these weights (``aggregation_weights.py``): FedVG + FedProx is ``algorithm.name=fedprox
algorithm.weighting=fedvg``, likewise ``scaffold``, ``feddyn`` and ``fedavgm``;
``weighting=avg`` is the paper's ``avg`` mode, w = (w_VG + n_k / sum n) / 2. This file holds
the scores and the validation set they are measured on.

Scores (``src/server/fedgrad.py``): the client's model in train mode, cross-entropy with
``reduction="sum"`` on the validation set in batches of ``score_batch_size`` (32, no
shuffle), gradients summed over batches and divided by the number of batches; s = sum over
parameter tensors of ||g_tensor|| (``norm`` 1 by default; 2; ``spectral``: the largest
singular value of the tensor reshaped to (rows, -1), the 2-norm for vectors).
``granularity``: ``model`` (one weight per client), ``layer`` (one per parameter tensor, its
own norm), ``block`` (one per named model block, the sum of its tensors' norms).

The validation set: by default ``val_ratio`` (0.1) of every client's training split, held out
(the client trains on the rest) and united; or ``val_dataset``, another dataset carried to
the workers as server-only samples. ``val_imbalance`` = rho makes it long-tailed as the
official code does (class c keeps a share rho^c of half the set); ``val_samples`` caps it.
``val_holdout=true`` holds the same share out of the clients under ``samples``/``uniform``
too, so a baseline trains on exactly FedVG's data (FL-bench's protocol: one split for all).

Where this differs from the official code: the seed writes s_k as the mean over layers, the
code (and we) the sum, which only rescales eps; the official imbalanced loader drops its
last partial batch (``drop_last``), we keep it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from fedsim.algorithm_params.aggregation_weights import WeightingParams
from fedsim.algorithm_params.fedvg import FedVGParams
from fedsim.algorithms.aggregation_weights import register_scorer
from fedsim.algorithms.base import ClientProbe, FederationInfo, NewcomerRule
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.registry import register
from fedsim.data.datasets import ImageDataset
from fedsim.data.federated import FederatedData
from fedsim.errors import ConfigError
from fedsim.streams import FEDVG_VAL_TAGS
from lightning_modules.flat_params import ParamLayout


@register
class FedVG(FedAvg):
    """FedAvg training; the server weights clients by inverse validation-gradient norm."""

    name = "fedvg"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Devkota et al. 2026: "
        "FedAvg's one global model (validation weights only change how it is made)",
    )
    Params = FedVGParams


# ----------------------------------------------------------------- scores (pure)


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


# ----------------------------------------------------------------- the validation set


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
    rng = np.random.default_rng([seed, *FEDVG_VAL_TAGS])
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


# ----------------------------------------------------------------- what the weights consult


@register_scorer("fedvg")
class ValidationScorer:
    """The validation set (built once on the driver) and a client model's scores per group,
    for ``AggregationWeights`` under ``weighting=fedvg | avg`` (or ``val_holdout``)."""

    def __init__(self, params: WeightingParams, federation: FederationInfo):
        self.params = params
        self.layout: ParamLayout = federation.layout
        self.groups = score_groups(params.granularity, federation)
        self.validation: ValidationSplit | None = None

    def prepare_data(
        self, data: FederatedData, load_dataset: Callable[[str], ImageDataset], seed: int
    ) -> FederatedData:
        """Build the validation set; the data the workers get (with server-only samples)."""
        data, self.validation = build_validation(self.params, data, load_dataset, seed)
        return data

    def train_indices(self, client: int) -> np.ndarray | None:
        """The client's train split minus its held-out samples (None: all of it)."""
        return None if self.validation is None else self.validation.train_subsets.get(client)

    def scores(self, probe: ClientProbe | None, params: torch.Tensor) -> dict[str, float]:
        """s per group for a client model: the sum of its tensors' validation-gradient norms."""
        if probe is None or self.validation is None:
            raise RuntimeError("FedVG scores need the worker's probe and a validation set")
        grad = validation_gradient(
            probe, params, self.validation.indices, self.params.score_batch_size
        )
        norms = {
            e.name: tensor_norm(self.layout.view(grad, e.name), self.params.norm)
            for e in self.layout.entries
        }
        return {g: sum(norms[n] for n in names) for g, names in self.groups.items()}

    def split(self, value: torch.Tensor) -> dict[str, torch.Tensor]:
        """A flat vector cut into its groups' parts (each the concatenation of its tensors)."""
        whole = len(self.layout.entries)
        return {
            g: value
            if len(names) == whole
            else torch.cat([value[self.layout.slice_of(n)] for n in names])
            for g, names in self.groups.items()
        }

    def join(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        """The inverse of ``split``: one flat float32 vector from its groups' parts."""
        out = torch.empty(self.layout.total, dtype=torch.float32)
        for group, names in self.groups.items():
            offset = 0
            for name in names:
                size = self.layout.by_name[name].numel
                out[self.layout.slice_of(name)] = parts[group][offset : offset + size]
                offset += size
        return out
