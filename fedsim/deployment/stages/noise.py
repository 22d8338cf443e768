"""The privacy-noise stage (``privacy.mode``) and its accountant.

Client side (``local``: std z * C with C the round's clip norm; ``fixed_sigma``: sigma):
Gaussian noise on the values sent (only the kept entries of a sparse update). Server side
(``central``): one draw per model sum, std z * C times the sum's largest weight; then each
client's participations and the ``epsilon`` spent so far (None where no guarantee holds).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fedsim.algorithms.base import WeightedSum
from fedsim.config import PrivacyConfig
from fedsim.deployment.privacy import gaussian_noise
from fedsim.deployment.stages.base import (
    ClientStep,
    ServerAggregation,
    StepContext,
    UploadStage,
    is_model_sum,
)
from fedsim.streams import CENTRAL_NOISE_TAG, LOCAL_NOISE_TAG


@dataclass(frozen=True)
class LocalNoise(ClientStep):
    std: float

    def apply(self, delta: torch.Tensor, context: StepContext) -> torch.Tensor:
        seed = [context.seed, context.round, context.client, LOCAL_NOISE_TAG]
        if context.sparse is None:
            return delta + gaussian_noise(delta.numel(), self.std, seed)
        index = torch.from_numpy(context.sparse.indices.astype("int64"))
        delta[index] += gaussian_noise(len(index), self.std, seed)  # the upload stays sparse
        return delta


class NoiseStage(UploadStage):
    """``clip_norm``: the round's clip norm C (None: no clipping)."""

    def __init__(
        self,
        config: PrivacyConfig,
        seed: int,
        clip_norm: Callable[[], float | None],
        *,
        num_clients: int,
        cohort_size: int,
        sampled: bool,
    ):
        self.config, self.seed, self.clip_norm = config, seed, clip_norm
        self.num_clients, self.cohort_size, self.sampled = num_clients, cohort_size, sampled
        self.participation: dict[int, int] = {}

    def client_step(self, client: int, round_idx: int) -> ClientStep | None:
        c, clip = self.config, self.clip_norm()
        if c.mode == "fixed_sigma" and c.sigma > 0:
            return LocalNoise(c.sigma)
        if c.mode == "local" and clip is not None and c.noise_multiplier * clip > 0:
            return LocalNoise(c.noise_multiplier * clip)
        return None

    def server(self, aggregation: ServerAggregation) -> None:
        c, clip = self.config, self.clip_norm()
        if c.mode == "central" and clip is not None:
            max_weights: dict[str, float] = {}
            for result in aggregation.trained:
                for key, weight in result.weights.items():
                    max_weights[key] = max(max_weights.get(key, 0.0), weight)
            std = c.noise_multiplier * clip
            add_central_noise(
                aggregation.sums, aggregation.patterns, max_weights, std, self.seed,
                aggregation.round,
            )  # fmt: skip
        for result in aggregation.trained:
            self.participation[result.client] = self.participation.get(result.client, 0) + 1
        aggregation.metrics.update(self.spent(aggregation.round))

    def spent(self, round_idx: int) -> dict[str, Any]:
        """``epsilon`` (None where no guarantee holds) after ``round_idx + 1`` rounds."""
        from fedsim.deployment.accountant import epsilon, local_epsilon, participation_epsilon

        p = self.config
        z = p.noise_multiplier
        if p.mode == "fixed_sigma":
            z = p.sigma / p.clip_norm if p.clip_norm is not None else math.nan
        most = max(self.participation.values(), default=0)
        if math.isnan(z):
            value: float | None = None
        elif p.mode == "central" and self.sampled:
            rate = self.cohort_size / max(self.num_clients, 1)
            value = epsilon(z, rate, round_idx + 1, p.delta)
        elif p.mode == "central":
            value = participation_epsilon(z, most, p.delta)
        else:
            value = local_epsilon(z, most, p.delta)
        if value is not None and not math.isfinite(value):
            value = None
        return {"epsilon": value, "dp_delta": p.delta}

    def state_dict(self) -> dict[str, Any]:
        return {"participation": dict(self.participation)}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        self.participation = dict((state or {}).get("participation") or {})


def add_central_noise(
    sums: dict[str, WeightedSum],
    patterns: tuple[str, ...],
    max_weights: dict[str, float],
    std: float,
    seed: int,
    round_idx: int,
) -> None:
    """Add one N(0, (std * max weight)^2) draw to every model sum, in place.

    A client's clipped update moves a weighted sum by at most C times its weight, so the
    noise scales with the largest weight in the sum (uniform weights: exactly z * C).
    """
    if std <= 0:
        return
    for key, total in sums.items():
        if total.value is None or not is_model_sum(key, patterns):
            continue
        scale = std * max_weights.get(key, 1.0)
        draw = gaussian_noise(
            total.value.numel(), scale, [seed, round_idx, CENTRAL_NOISE_TAG, _key_id(key)]
        )
        total.value = total.value + draw.to(torch.float64).reshape(total.value.shape)


def _key_id(key: str) -> int:
    return zlib.crc32(key.encode())
