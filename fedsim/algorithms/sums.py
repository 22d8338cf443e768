"""Weighted sums in float64: what clients contribute and workers reduce before they send.

A worker adds its clients' ``(weight, value)`` terms into one ``WeightedSum`` per key and
returns it; the driver merges the workers' sums in a fixed order. float64 makes the result
independent of how clients were spread over workers (to the float32 mean it ends in).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch


@dataclass
class WeightedSum:
    """Running sum_i w_i x_i and sum_i w_i, in float64 so reduction order does not matter."""

    weight: float = 0.0
    value: torch.Tensor | None = None

    def add(self, weight: float, value: torch.Tensor) -> None:
        """Add ``weight * value``: the same float64 numbers as ``value.double() * weight``,
        computed without per-client allocations."""
        value, weight = value.detach(), float(weight)
        if self.value is None:
            self.value = value.to(torch.float64, copy=True).mul_(weight)
        else:
            _add_term(self.value, weight, value)
        self.weight += weight

    def merge(self, other: WeightedSum) -> None:
        if other.value is None:
            return
        self.value = other.value.clone() if self.value is None else self.value.add_(other.value)
        self.weight += other.weight

    def mean(self) -> torch.Tensor:
        """sum w x / sum w, as float32."""
        return (self.value / self.weight).to(torch.float32)


def _add_term(total: torch.Tensor, weight: float, value: torch.Tensor) -> None:
    """``total += float64(value) * weight`` in place, rounded as that expression is."""
    term = _scratch(value)
    term.copy_(value)  # float64 (a vectorized conversion; mixed-dtype add_ is 2x slower)
    if value.dtype == torch.float32 and weight.is_integer() and abs(weight) < 2**29:
        # x * w is exact in float64 (24-bit mantissa times a 29-bit integer), so the fused
        # add rounds the sum exactly as the two steps below do (sample-count weights)
        total.add_(term, alpha=weight)
    else:
        total.add_(term.mul_(weight))


_SCRATCH = threading.local()  # per thread: {device: flat float64 buffer}


def _scratch(like: torch.Tensor) -> torch.Tensor:
    """A float64 tensor shaped like ``like`` (contents undefined), reusing one buffer per
    thread and device: allocating the float64 term anew for every client costs more than
    the arithmetic (page faults on a fresh block)."""
    buffers = _SCRATCH.__dict__.setdefault("buffers", {})
    flat = buffers.get(like.device)
    if flat is None or flat.numel() < like.numel():
        flat = torch.empty(like.numel(), dtype=torch.float64, device=like.device)
        buffers[like.device] = flat
    return flat[: like.numel()].view(like.shape)


def merge_sums(parts: list[dict[str, WeightedSum]]) -> dict[str, WeightedSum]:
    """Combine per-worker partial aggregates, in the given (fixed) order."""
    total: dict[str, WeightedSum] = {}
    for part in parts:
        for key, ws in part.items():
            total.setdefault(key, WeightedSum()).merge(ws)
    return total
