"""The client side of the upload pipeline, run on the worker right after local training.

The driver decides everything per task (``UploadJob``): what the client uploads (the
algorithm's ``ModelUpload``), the stages' client steps in order (attack corruption,
clipping, compression, local noise: ``fedsim/deployment/stages/``), how its training data
looks to it (the stages' ``TrainingView``s: an attacker's flipped labels), and whether its
sums go to the driver on their own. The worker applies the
steps to the delta of the uploaded entries, relative to the model the client trained from,
and rebuilds the trained model from the processed delta before ``client_finish`` sees it,
so every sum the algorithm makes of it (FedVG's scored parts, FedPer's base, cwFedAvg's
class sums) holds what the client really sent. With every option at its default a task
carries no job and nothing here runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.base import ModelUpload
from fedsim.deployment.stages.base import ClientStep, StepContext, TrainingView
from lightning_modules.flat_params import gather, scatter


@dataclass
class UploadJob:
    """One client task's upload, decided on the driver (see the module docstring)."""

    seed: int
    model: ModelUpload | None = None  # what the client uploads (None: no model update)
    steps: tuple[ClientStep, ...] = ()
    views: tuple[TrainingView, ...] = ()  # what the client trains on, stage by stage
    individual: bool = False  # its sums go to the driver on their own, not in a partial sum
    need_delta: bool = False  # ... with its flat update (the anomaly filter, krum)
    # asynchronous rounds: the upload is rebuilt on this server model (the newest, not the
    # stale one the client trained from) with its delta times ``delta_scale`` (the discount)
    rebase: torch.Tensor | None = None
    delta_scale: float = 1.0


@dataclass
class UploadReport:
    """What the client side reports back to the driver."""

    norm: float | None = None  # the delta's norm before clipping
    residual: torch.Tensor | None = None  # error feedback: what was not sent
    sparse_nbytes: int | None = None  # compressed: indices + values
    dense_nbytes: int = 0  # the uncompressed model upload (float32)
    delta: torch.Tensor | None = None  # full-length delta, zero outside the upload
    sums: dict[str, tuple[float, torch.Tensor]] | None = None  # the client's own sums
    extra: dict[str, float] = field(default_factory=dict)


def run_client_steps(
    job: UploadJob, start: torch.Tensor, trained: torch.Tensor, round_idx: int, client: int
) -> tuple[torch.Tensor, UploadReport]:
    """(the model the client uploads, what happened): ``trained`` with its uploaded entries
    replaced by ``start + processed delta``; the rest (personal layers) untouched."""
    assert job.model is not None
    ranges = job.model.ranges
    base = gather(start.to(torch.float32), ranges)
    delta = gather(trained, ranges) - base
    report = UploadReport(dense_nbytes=4 * delta.numel())
    if not job.steps and job.rebase is None:
        return trained, _with_delta(report, job, delta, trained)
    context = StepContext(job.seed, round_idx, client, report)
    for step in job.steps:
        delta = step.apply(delta, context)
    out = trained.clone()
    if job.rebase is None:
        scatter(out, ranges, base + delta)
    else:  # asynchronous: the newest server model + the discounted delta
        scatter(out, ranges, gather(job.rebase.float(), ranges) + job.delta_scale * delta)
    return out, _with_delta(report, job, delta, trained)


def _with_delta(
    report: UploadReport, job: UploadJob, delta: torch.Tensor, trained: torch.Tensor
) -> UploadReport:
    """Keep the full-length delta (zero outside the upload) when the server needs it."""
    if job.need_delta:
        full = torch.zeros(trained.numel(), dtype=torch.float32)
        scatter(full, job.model.ranges if job.model else None, delta.to(torch.float32))
        report.delta = full
    return report


def upload_nbytes(algorithm_nbytes: int, report: UploadReport | None) -> int:
    """The client's ``bytes_up``: the algorithm's count, with a compressed model upload
    counted as its indices + values instead of its dense float32 entries."""
    if report is None or report.sparse_nbytes is None:
        return algorithm_nbytes
    return max(0, algorithm_nbytes - report.dense_nbytes) + report.sparse_nbytes


def training_data(job: UploadJob | None, data: Any) -> Any:
    """The data a client's main pass reads: ``data`` through the job's views, in order."""
    for view in () if job is None else job.views:
        data = view.data(data)
    return data


def training_counts(job: UploadJob | None, counts: np.ndarray) -> np.ndarray:
    """The class counts the algorithm sees of a client's training data, through its views."""
    for view in () if job is None else job.views:
        counts = view.class_counts(counts)
    return counts
