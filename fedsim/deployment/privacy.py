"""Clipping and Gaussian noise for client updates, and adaptive clipping (pure torch/numpy).

Noise placement (``noise_std`` gives the number):

- ``local``: each client adds N(0, (z * C)^2) to its own clipped update before upload.
- ``central``: the server adds ONE draw of N(0, (z * C)^2) per round to the SUM of the
  round's clipped updates (sensitivity C when one client is added or removed); divide by the
  cohort size afterwards, not before. Weighting the sum by sample counts multiplies the
  sensitivity by the largest weight, so DP-FedAvg uses uniform (or capped) weights.
- ``fixed_sigma``: N(0, sigma^2) on the upload, no accounting (the FedPer seed's rule).

z is ``noise_multiplier``, C is ``clip_norm``. All noise is drawn from explicit seeds, never
from global random state, so a run does not depend on which worker drew it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

NOISE_MODES = ("local", "central", "fixed_sigma")


def clip_to_norm(delta: torch.Tensor, clip_norm: float) -> tuple[torch.Tensor, float]:
    """``delta * min(1, clip_norm / ||delta||_2)`` and the norm before clipping.

    A zero (or already small enough) delta comes back unchanged (the same values, new tensor).
    """
    if not clip_norm > 0:
        raise ValueError(f"clip_norm={clip_norm!r}: must be > 0")
    norm = float(torch.linalg.vector_norm(delta.detach(), dtype=torch.float64))
    if norm <= clip_norm:
        return delta.clone(), norm
    return delta * (clip_norm / norm), norm


def gaussian_noise(numel: int, std: float, seed: Sequence[int]) -> torch.Tensor:
    """float32 N(0, std^2) with ``numel`` entries (CPU), a function of ``seed`` only.

    ``seed`` is a sequence of non-negative ints, e.g. ``(run_seed, round, client, stream)``:
    numpy's SeedSequence mixes it into the seed of a private torch Generator.
    """
    if not std >= 0:
        raise ValueError(f"noise std={std!r}: must be >= 0")
    if numel < 0:
        raise ValueError(f"numel={numel!r}: must be >= 0")
    if std == 0:
        return torch.zeros(numel, dtype=torch.float32)
    state = np.random.SeedSequence(list(seed)).generate_state(2, dtype=np.uint32)
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(state[0]) << 32 | int(state[1]))
    return torch.randn(numel, generator=generator, dtype=torch.float32) * std


def add_noise(values: torch.Tensor, std: float, seed: Sequence[int]) -> torch.Tensor:
    """``values`` plus ``gaussian_noise`` of its shape, on its device and in its dtype."""
    noise = gaussian_noise(values.numel(), std, seed).reshape(values.shape)
    return values + noise.to(device=values.device, dtype=values.dtype)


def noise_std(
    mode: str, *, clip_norm: float = 0.0, noise_multiplier: float = 0.0, sigma: float = 0.0
) -> float:
    """Standard deviation of the one noise draw ``mode`` adds (see the module docstring).

    ``local``: z * C, added by every client; ``central``: z * C, added once to the round's
    sum; ``fixed_sigma``: ``sigma`` as given.
    """
    if mode == "fixed_sigma":
        if not sigma >= 0:
            raise ValueError(f"privacy.sigma={sigma!r}: must be >= 0")
        return float(sigma)
    if mode not in NOISE_MODES:
        raise ValueError(f"privacy.mode={mode!r}: allowed: {', '.join(NOISE_MODES)}")
    if not noise_multiplier >= 0:
        raise ValueError(f"privacy.noise_multiplier={noise_multiplier!r}: must be >= 0")
    if not clip_norm > 0:
        raise ValueError(f"privacy.clip_norm={clip_norm!r}: must be > 0")
    return float(noise_multiplier * clip_norm)


def adaptive_update_noise_multiplier(noise_multiplier: float, count_noise_std: float) -> float:
    """Noise multiplier for the update sum when the unclipped count is noised too.

    Andrew et al. (2021), Theorem 1: noise z_delta on the sum and sigma_b on the count compose
    to one Gaussian mechanism with z = (z_delta^-2 + (2 sigma_b)^-2)^-1/2; so for a target z
    (the one the accountant sees) the sum gets z_delta = (z^-2 - (2 sigma_b)^-2)^-1/2.
    Flower's ``compute_adaptive_noise_params`` does the same.
    """
    if noise_multiplier == 0 or count_noise_std == 0:
        return float(noise_multiplier)
    if noise_multiplier >= 2 * count_noise_std:
        raise ValueError(
            f"count_noise_std={count_noise_std!r}: must exceed noise_multiplier / 2 "
            f"({noise_multiplier / 2}) for adaptive clipping to fit the privacy budget"
        )
    return float((noise_multiplier**-2 - (2 * count_noise_std) ** -2) ** -0.5)


@dataclass
class AdaptiveClipNorm:
    """Clip norm that tracks a quantile of the update norms (Andrew et al., 2021).

    "Differentially Private Learning with Adaptive Clipping" (NeurIPS 2021, arXiv 1905.03871),
    geometric update, as in TF Privacy's ``QuantileAdaptiveClipSumQuery`` and Flower's
    ``DifferentialPrivacyClientSideAdaptiveClipping``: with b_bar the (noised) fraction of the
    round's clients whose update norm is <= C,

        C <- C * exp(-learning_rate * (b_bar - target_quantile)).

    b_bar = (count + N(0, count_noise_std^2)) / num_clients. The paper recommends
    target_quantile 0.5, learning_rate 0.2 and count_noise_std = clients per round / 20.
    The count noise of step t is drawn from ``(*seed, t)``, so a pickled copy continues the
    same sequence.
    """

    value: float
    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_noise_std: float = 0.0
    seed: tuple[int, ...] = (0,)
    steps: int = 0

    def __post_init__(self) -> None:
        if not self.value > 0:
            raise ValueError(f"initial clip norm={self.value!r}: must be > 0")
        if not 0 <= self.target_quantile <= 1:
            raise ValueError(f"target_quantile={self.target_quantile!r}: must be in [0, 1]")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate!r}: must be > 0")
        if not self.count_noise_std >= 0:
            raise ValueError(f"count_noise_std={self.count_noise_std!r}: must be >= 0")
        self.seed = tuple(int(s) for s in self.seed)

    def update(self, fraction_unclipped: float, num_clients: int | None = None) -> float:
        """Move the clip norm after a round in which ``fraction_unclipped`` had norm <= C.

        ``num_clients`` (the cohort size) is needed only when the count is noised.
        """
        if not 0 <= fraction_unclipped <= 1:
            raise ValueError(f"fraction_unclipped={fraction_unclipped!r}: must be in [0, 1]")
        fraction = float(fraction_unclipped)
        if self.count_noise_std > 0:
            if not num_clients or num_clients < 1:
                raise ValueError("num_clients: needed (>= 1) when count_noise_std > 0")
            rng = np.random.default_rng(np.random.SeedSequence([*self.seed, self.steps]))
            fraction += float(rng.normal(0.0, self.count_noise_std)) / num_clients
        self.value *= math.exp(-self.learning_rate * (fraction - self.target_quantile))
        self.steps += 1
        return self.value

    def update_from_norms(self, norms: Sequence[float]) -> float:
        """``update`` from the round's update norms (before clipping) against the current C."""
        if len(norms) == 0:
            return self.value
        unclipped = sum(1 for n in norms if n <= self.value)
        return self.update(unclipped / len(norms), len(norms))
