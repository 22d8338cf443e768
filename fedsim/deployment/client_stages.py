"""The client stages of the upload pipeline, run on the worker right after local training.

On the entries the algorithm uploads (``Algorithm.model_upload``), relative to the model the
client trained from, in this fixed order: attack corruption, clipping to the round's clip
norm, compression (with optional error feedback), local noise (on the values sent). The
trained model is rebuilt from the processed delta before ``client_finish`` sees it, so every
sum the algorithm makes of it (FedVG's scored parts, FedPer's base, cwFedAvg's class sums)
holds what the client really sent. Nothing here runs when every option is at its default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedsim.algorithms.base import ModelUpload
from fedsim.deployment.attacks import corrupt_delta
from fedsim.deployment.compression import Sparse, make_encoder
from fedsim.deployment.privacy import clip_to_norm, gaussian_noise
from fedsim.streams import ATTACK_NOISE_TAG, LOCAL_NOISE_TAG
from lightning_modules.flat_params import gather, scatter


@dataclass(frozen=True)
class UploadSettings:
    """The run's client-stage settings (the same object for every task of a run)."""

    seed: int
    attack_kind: str = "none"
    attack_factor: float = 1.0
    local_noise: str = "none"  # none | local (z * C) | fixed_sigma (sigma)
    noise_multiplier: float = 0.0
    sigma: float = 0.0
    compression: str = "none"
    threshold: float = 0.0
    fraction: float = 1.0
    error_feedback: bool = False


@dataclass
class ClientUpload:
    """One client's round: whether it attacks, its clip norm, its error-feedback residual,
    and whether the server needs its update on its own (robust rules, anomaly filter)."""

    settings: UploadSettings
    attacking: bool = False
    clip_norm: float | None = None
    residual: torch.Tensor | None = None
    individual: bool = False
    need_delta: bool = False
    # asynchronous rounds: the upload is rebuilt on this server model (the newest, not the
    # stale one the client trained from) with its delta times ``delta_scale`` (the discount)
    rebase: torch.Tensor | None = None
    delta_scale: float = 1.0

    @property
    def flips_labels(self) -> bool:
        return self.attacking and self.settings.attack_kind == "label_flip"

    @property
    def changes_upload(self) -> bool:
        """Whether any client stage touches the upload."""
        s = self.settings
        corrupts = self.attacking and s.attack_kind not in ("none", "label_flip")
        return (
            corrupts
            or self.rebase is not None
            or self.clip_norm is not None
            or s.compression != "none"
            or s.local_noise != "none"
        )


@dataclass
class UploadReport:
    """What the client stages report back to the driver."""

    norm: float | None = None  # the delta's norm before clipping
    residual: torch.Tensor | None = None  # error feedback: what was not sent
    sparse_nbytes: int | None = None  # compressed: indices + values
    dense_nbytes: int = 0  # the uncompressed model upload (float32)
    delta: torch.Tensor | None = None  # full-length delta, zero outside the upload
    sums: dict[str, tuple[float, torch.Tensor]] | None = None  # shipped one client at a time
    extra: dict[str, float] = field(default_factory=dict)


def run_client_stages(
    job: ClientUpload,
    upload: ModelUpload,
    start: torch.Tensor,
    trained: torch.Tensor,
    round_idx: int,
    client: int,
) -> tuple[torch.Tensor, UploadReport]:
    """(the model the client uploads, what happened): ``trained`` with its uploaded entries
    replaced by ``start + processed delta``; the rest (personal layers) untouched."""
    s = job.settings
    ranges = upload.ranges
    base = gather(start.to(torch.float32), ranges)
    delta = gather(trained, ranges) - base
    report = UploadReport(dense_nbytes=4 * delta.numel())
    if not job.changes_upload:
        return trained, _with_delta(report, job, delta, ranges, trained)
    if job.attacking and s.attack_kind not in ("none", "label_flip"):
        seed = [s.seed, round_idx, client, ATTACK_NOISE_TAG]
        delta = corrupt_delta(s.attack_kind, delta, s.attack_factor, seed)
    if job.clip_norm is not None:
        delta, report.norm = clip_to_norm(delta, job.clip_norm)
    sparse: Sparse | None = None
    encode = make_encoder(s.compression, threshold=s.threshold, fraction=s.fraction)
    if encode is not None:
        corrected = delta if job.residual is None or not s.error_feedback else delta + job.residual
        sparse = encode(corrected)
        sent = sparse.to_dense()
        if s.error_feedback:
            report.residual = corrected - sent
        delta = sent
        report.sparse_nbytes = sparse.nbytes
    std = _noise_std(job)
    if std > 0:
        seed = [s.seed, round_idx, client, LOCAL_NOISE_TAG]
        if sparse is None:
            delta = delta + gaussian_noise(delta.numel(), std, seed)
        else:  # noise on the values sent: the upload stays sparse
            index = torch.from_numpy(sparse.indices.astype("int64"))
            delta[index] += gaussian_noise(len(index), std, seed)
    out = trained.clone()
    if job.rebase is None:
        scatter(out, ranges, base + delta)
    else:  # asynchronous: the newest server model + the discounted delta
        scatter(out, ranges, gather(job.rebase.float(), ranges) + job.delta_scale * delta)
    return out, _with_delta(report, job, delta, ranges, trained)


def _noise_std(job: ClientUpload) -> float:
    s = job.settings
    if s.local_noise == "fixed_sigma":
        return s.sigma
    if s.local_noise == "local" and job.clip_norm is not None:
        return s.noise_multiplier * job.clip_norm
    return 0.0


def _with_delta(
    report: UploadReport,
    job: ClientUpload,
    delta: torch.Tensor,
    ranges: list[tuple[int, int]] | None,
    trained: torch.Tensor,
) -> UploadReport:
    """Keep the full-length delta (zero outside the upload) when the server needs it."""
    if job.need_delta:
        full = torch.zeros(trained.numel(), dtype=torch.float32)
        scatter(full, ranges, delta.to(torch.float32))
        report.delta = full
    return report


def upload_nbytes(algorithm_nbytes: int, report: UploadReport | None) -> int:
    """The client's ``bytes_up``: the algorithm's count, with a compressed model upload
    counted as its indices + values instead of its dense float32 entries."""
    if report is None or report.sparse_nbytes is None:
        return algorithm_nbytes
    return max(0, algorithm_nbytes - report.dense_nbytes) + report.sparse_nbytes
