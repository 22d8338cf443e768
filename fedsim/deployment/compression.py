"""Sparse uploads: threshold and top-k encoders of a flat update, and error feedback.

An update is flattened (``reshape(-1)``) before encoding; ``Sparse.to_dense`` gives it back
flat. ``Sparse.nbytes`` (indices + values) is what ``bytes_up`` counts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

COMPRESSION_KINDS = ("none", "threshold", "topk")

Encoder = Callable[[torch.Tensor], "Sparse"]


@dataclass
class Sparse:
    """The entries of a flat vector of length ``size`` that were kept: int indices, float32."""

    indices: np.ndarray
    values: np.ndarray
    size: int

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: indices plus values."""
        return int(self.indices.nbytes + self.values.nbytes)

    def to_dense(self) -> torch.Tensor:
        """The flat float32 vector, zero where nothing was sent."""
        dense = torch.zeros(self.size, dtype=torch.float32)
        dense[torch.from_numpy(self.indices.astype(np.int64))] = torch.from_numpy(self.values)
        return dense


def _flat_numpy(delta: torch.Tensor) -> np.ndarray:
    return delta.detach().reshape(-1).to(device="cpu", dtype=torch.float32).numpy()


def _sparse(flat: np.ndarray, indices: np.ndarray) -> Sparse:
    index_dtype = np.int32 if flat.size < 2**31 else np.int64
    return Sparse(
        indices=indices.astype(index_dtype),
        values=flat[indices].astype(np.float32),
        size=int(flat.size),
    )


def encode_threshold(delta: torch.Tensor, tau: float) -> Sparse:
    """Keep the entries with |delta| > tau (the FedPer seed: send what changed enough)."""
    if not tau >= 0:
        raise ValueError(f"compression.threshold={tau!r}: must be >= 0")
    flat = _flat_numpy(delta)
    return _sparse(flat, np.flatnonzero(np.abs(flat) > tau))


def topk_count(numel: int, fraction: float) -> int:
    """ceil(fraction * numel), robust to float error (0.07 * 100 is 7, not 8)."""
    return min(numel, math.ceil(round(fraction * numel, 9)))


def encode_topk(delta: torch.Tensor, fraction: float) -> Sparse:
    """Keep the ceil(fraction * n) largest |delta|; ties go to the lowest index.

    O(n) (a partition, not a sort); indices come back in increasing order.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"compression.fraction={fraction!r}: must be in (0, 1]")
    flat = _flat_numpy(delta)
    count = topk_count(flat.size, fraction)
    if count >= flat.size:
        return _sparse(flat, np.arange(flat.size))
    magnitude = np.abs(flat)
    kth_largest = np.partition(magnitude, flat.size - count)[flat.size - count]
    above = np.flatnonzero(magnitude > kth_largest)
    ties = np.flatnonzero(magnitude == kth_largest)[: count - above.size]
    return _sparse(flat, np.sort(np.concatenate([above, ties])))


def make_encoder(kind: str, *, threshold: float = 0.0, fraction: float = 1.0) -> Encoder | None:
    """The encoder a ``compression.kind`` names (picklable), or None for ``none``."""
    if kind == "none":
        return None
    if kind == "threshold":
        encode_threshold(torch.zeros(0), threshold)  # validates tau
        return functools.partial(encode_threshold, tau=threshold)
    if kind == "topk":
        encode_topk(torch.zeros(0), fraction)  # validates fraction
        return functools.partial(encode_topk, fraction=fraction)
    raise ValueError(f"compression.kind={kind!r}: allowed: {', '.join(COMPRESSION_KINDS)}")


def error_feedback_step(
    delta: torch.Tensor, residual: torch.Tensor | None, encode: Encoder
) -> tuple[Sparse, torch.Tensor]:
    """Compress ``delta + residual``; the new residual is what was not sent.

    sent + new residual == delta + old residual, so nothing is lost, only delayed.
    """
    corrected = delta.detach().reshape(-1).to(device="cpu", dtype=torch.float32)
    if residual is not None:
        corrected = corrected + residual
    sparse = encode(corrected)
    return sparse, corrected - sparse.to_dense()


@dataclass
class ErrorFeedback:
    """A client's error-feedback memory: a flat float32 residual (None before the first use)."""

    residual: torch.Tensor | None = None

    def compress(self, delta: torch.Tensor, encode: Encoder) -> Sparse:
        """``error_feedback_step``, keeping the new residual."""
        sparse, self.residual = error_feedback_step(delta, self.residual, encode)
        return sparse
