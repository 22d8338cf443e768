"""FedVG: gradient-guided aggregation (Devkota et al., CVPR 2026, arXiv 2602.21399; seed 003).

Official code alinadevkota/FedVG (FL-bench; ``src/server/fedgrad*.py``). Rules:
ALGORITHMS.md, "FedVG". The server scores every uploaded model k by how flat the
cross-entropy is at it on a server validation set, s_k = sum_l ||g_{k,l}||_p, and averages
with w_k = (1/(s_k + eps)) / sum_j (1/(s_j + eps)): flatter (smaller gradient) weighs more.
Clients train exactly as in FedAvg.

``fedvg`` is FedAvg with ``algorithm.weighting=fedvg``; the scoring, the validation set and
the granularities live in ``weighting.py`` because they are one mechanism every FedAvg-family
algorithm consults: FedVG + FedProx is ``algorithm.name=fedprox algorithm.weighting=fedvg``,
and likewise for ``scaffold``, ``feddyn`` and ``fedavgm``; ``weighting=avg`` is the paper's
``avg`` mode, w = (w_VG + n_k / sum n) / 2. Keys (``algorithm.*``): ``val_ratio`` (0.1),
``val_dataset``, ``val_imbalance`` (rho), ``val_samples``, ``norm`` (1 | 2 | spectral),
``granularity`` (model | layer | block), ``score_batch_size`` (32), ``eps`` (1e-8),
``val_holdout`` (baselines train on FedVG's 90% too).

Where this differs from the official code: the seed writes s_k as the mean over layers, the
code (and we) the sum, which only rescales eps; the official imbalanced loader drops its
last partial batch (``drop_last``), we keep it. With the default held-out split FedVG clients
train on 90% of their training split; ``fedavg`` trains on all of it unless compared with
``algorithm.name=fedvg algorithm.weighting=samples algorithm.val_holdout=true``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithms.registry import register
from fedsim.algorithms.weighting import (
    WeightedFedAvg,
    WeightingParams,
    inverse_weights,
    tensor_norm,
    validation_gradient,
)

__all__ = ["FedVG", "FedVGParams", "inverse_weights", "tensor_norm", "validation_gradient"]


@dataclass
class FedVGParams(WeightingParams):
    """``algorithm.*`` keys of FedVG: the shared weighting keys, FedVG weights by default."""

    weighting: str = "fedvg"


@register
class FedVG(WeightedFedAvg):
    """FedAvg training; the server weights clients by inverse validation-gradient norm."""

    name = "fedvg"
    Params = FedVGParams
