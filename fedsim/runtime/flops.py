"""What a client's local training costs (``eval.count_flops``): FLOPs as they happen, and on
a GPU the peak memory of its training.

``CostMeter.count`` runs a piece of a client's work under torch's ``FlopCounterMode``, which
counts every matrix product and convolution the work dispatches (forward and backward, the
algorithm's extra passes included: Ditto's personal pass, MOON's forwards of the global and
the previous model, FedRep's head epochs, pFedMe's inner steps), and adds the count to the
client's result. The worker counts a training client's ``client_start`` (where FedRep trains
its head, and FedBABU fine-tunes before an evaluation), its main pass and ``client_finish``;
evaluation itself is not counted. Element-wise work (activations, the optimizer's update) is
not counted, as in every FLOP count of a network. ``batch_flops`` is the same count for one
batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode


class CostMeter:
    """Counts FLOPs (and, on CUDA, peak memory) of the work run under ``count``; does
    nothing when not ``enabled``, so a run that does not ask pays nothing."""

    def __init__(self, enabled: bool, device: torch.device):
        self.enabled, self.device = enabled, device

    @contextlib.contextmanager
    def count(self, out: Any, active: bool = True) -> Iterator[None]:
        """Adds the FLOPs of the block to ``out.flops`` and raises ``out.peak_memory`` to the
        block's peak of allocated CUDA memory (bytes; ``out`` is a ``ClientResult``); counts
        nothing unless ``active`` (a client that does not train this round)."""
        if not (self.enabled and active):
            yield
            return
        cuda = self.device.type == "cuda"
        if cuda and out.flops is None:  # the client's first counted block
            torch.cuda.reset_peak_memory_stats(self.device)
        counter = FlopCounterMode(display=False)
        with counter:
            yield
        out.flops = (out.flops or 0) + int(counter.get_total_flops())
        if cuda:
            peak = int(torch.cuda.max_memory_allocated(self.device))
            out.peak_memory = max(out.peak_memory or 0, peak)


def batch_flops(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[int, int]:
    """FLOPs of ``module``'s forward on one batch, and of that forward with the backward of
    its cross-entropy loss (gradients of every parameter; none for the input). The module's
    gradients are left as they were."""
    saved = [p.grad for p in module.parameters()]
    with FlopCounterMode(display=False) as forward:
        module(x)
    with FlopCounterMode(display=False) as both:
        torch.nn.functional.cross_entropy(module(x), y).backward()
    for p, grad in zip(module.parameters(), saved, strict=True):
        p.grad = grad
    return int(forward.get_total_flops()), int(both.get_total_flops())


__all__ = ["CostMeter", "batch_flops"]
