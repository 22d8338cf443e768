"""Gradient and curvature tasks: what an algorithm may ask the worker pool to compute.

Plain data, below both layers: an algorithm that trains by exchanging gradients (SP-CACW,
through ``Algorithm.train_round``) builds these without importing the runtime, and the
runtime runs them without knowing the algorithm. Samples are dataset indices (a client's
``FederationInfo.client_train_indices`` are such indices), so the caller decides every
minibatch and the results do not depend on which worker ran a task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

GRAM_CHUNK = 8192  # columns per float32 product of ``gram``


def gram(stack: torch.Tensor) -> torch.Tensor:
    """S S^T (float64) of an (R, P) float32 stack: float32 products of ``GRAM_CHUNK`` columns
    at a time, summed in float64 (as fast as one float32 product, ~25x closer to the exact
    value on 0.2 M columns). What a stacked task's ``gram`` is; SP-CACW's own Gram matrices
    are computed the same way."""
    out = torch.zeros(stack.shape[0], stack.shape[0], dtype=torch.float64)
    for start in range(0, stack.shape[1], GRAM_CHUNK):
        chunk = stack[:, start : start + GRAM_CHUNK]
        out += (chunk @ chunk.T).double()
    return out


@dataclass
class GradientTask:
    """Gradient of the mean CE loss at ``params`` on some of ``client``'s samples.

    A round of gradients instead of local training (SP-CACW: every client returns a
    stochastic gradient at the target's model). Samples: ``indices`` if given (e.g. a
    server-side validation set), else the client's training split; ``num_samples`` draws a
    minibatch of that many from them, seeded by (seed, round, client, ``key``), so it does not
    depend on the worker. No client terms.

    Stacked form (``stack`` set): ``broadcast[stack]`` is an (R, P) stack of parameter
    vectors, shipped once per worker; the task computes one gradient per ``(row, indices)``
    entry of ``at`` (the gradient at row ``row`` on those samples), all in this one task, and
    its output's ``gradient`` is the (len(at), P) stack of them, ``losses`` one per entry;
    with ``gram`` its ``gram`` is the stack's Gram matrix G G^T (``gram`` below, float64).
    Entries at one row with equal sample counts are computed together (one ``vmap``), so
    several clients' minibatches at one model (SP-CACW: all peers at a target's model) are
    one task.
    """

    client: int
    params: torch.Tensor | None = None  # None: broadcast["params"]
    num_samples: int | None = None  # None: all the samples
    indices: np.ndarray | None = None
    train_mode: bool = True
    key: int = 0
    tag: Any = None  # returned as is, to match outputs to requests
    stack: str | None = None  # broadcast key of an (R, P) parameter stack
    at: list[tuple[int, np.ndarray]] = field(default_factory=list)  # (row, samples) per gradient
    gram: bool = False  # stacked form: also return the (len(at), len(at)) Gram matrix


@dataclass
class CurvatureTask:
    """Top Hessian eigenvalue of the mean CE loss at ``params`` on ``client``'s samples.

    Hessian-vector products by double backpropagation, ``iterations`` steps of power
    iteration from a start vector seeded by (seed, round, client, ``key``); samples as for a
    GradientTask (``indices``, else the train split; ``num_samples`` a seeded subset). Eval
    mode, plain cross-entropy. The output's ``eigenvalue`` is the final Rayleigh quotient:
    the eigenvalue of largest magnitude, i.e. the local smoothness constant L.
    """

    client: int
    params: torch.Tensor | None = None  # None: broadcast["params"]
    iterations: int = 20
    num_samples: int | None = None
    indices: np.ndarray | None = None
    key: int = 0
    tag: Any = None


@dataclass
class TaskOutput:
    """What a gradient or curvature task gave: the ``gradient`` (a stack for a stacked task),
    the mean ``loss`` on ``num_samples`` (``losses`` per stacked entry), the ``eigenvalue``,
    the stack's ``gram`` if asked.

    From the Ray pool ``gradient`` is a read-only view of the transfer buffer (no copy of
    the targets x peers gradients on the driver): read it, never write into it."""

    client: int
    tag: Any = None
    gradient: torch.Tensor | None = None
    loss: float | None = None
    num_samples: int = 0
    losses: list[float] | None = None
    eigenvalue: float | None = None
    gram: torch.Tensor | None = None  # stacked task with ``gram``: G G^T of ``gradient``
