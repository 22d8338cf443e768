"""Config sections of the deployment options: ``aggregation``, ``attack``, ``privacy``,
``compression`` (docs/deployment.md explains them). Plain data: the stages that act on them
live in ``fedsim/deployment/``.

Each range is declared on its field with ``checked``; rules that need more than one key or
the federation's size are in ``fedsim/deployment/checks.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.checks import checked

RULES = ("mean", "median", "trimmed_mean", "krum", "multikrum", "bulyan")


ATTACKS = ("none", "label_flip", "sign_flip", "scale", "gaussian")


PRIVACY_MODES = ("none", "local", "central", "fixed_sigma")


COMPRESSIONS = ("none", "threshold", "topk")


@dataclass
class AggregationConfig:
    """``aggregation``: how the server combines the clients' model updates."""

    rule: str = checked(  # mean | median | trimmed_mean | krum | multikrum | bulyan
        "mean", lambda v: v in RULES, f"allowed: {', '.join(RULES)}"
    )
    trim: float = checked(  # trimmed_mean: share of updates cut from each end per coordinate
        0.1, lambda v: 0 <= v < 0.5, "must be in [0, 0.5)"
    )
    krum_f: int = checked(  # krum / multikrum / bulyan: attackers tolerated (f)
        1, lambda v: v >= 0, "must be >= 0"
    )
    krum_m: int | None = checked(  # multikrum: best-scored updates averaged (null: n - f)
        None, lambda v: v is None or v >= 1, "must be >= 1 (or null: n - f)"
    )
    # drop updates whose cosine to the coordinate-wise median update is below this (the
    # seed's 0.5); null: no filter
    anomaly_cosine: float | None = checked(
        None, lambda v: v is None or -1 <= v <= 1, "must be in [-1, 1] (or null: no filter)"
    )

    @property
    def needs_individual(self) -> bool:
        """Whether the server needs every client's update on its own (not a partial sum)."""
        return self.rule != "mean" or self.anomaly_cosine is not None


@dataclass
class AttackConfig:
    """``attack``: a seeded share of clients corrupts what it uploads (to test defences)."""

    kind: str = checked(  # none | label_flip | sign_flip | scale | gaussian
        "none", lambda v: v in ATTACKS, f"allowed: {', '.join(ATTACKS)}"
    )
    fraction: float = checked(  # share of the clients that attack, drawn from the seed
        0.2, lambda v: 0 <= v <= 1, "must be in [0, 1]"
    )
    start_round: int = checked(  # the first round in which attackers attack
        0, lambda v: v >= 0, "must be >= 0"
    )
    # sign_flip sends -factor * update, scale factor * update, gaussian noise of factor
    # times the update's norm
    factor: float = checked(4.0, lambda v: v > 0, "must be > 0")


@dataclass
class PrivacyConfig:
    """``privacy``: clip each client's update and add Gaussian noise (differential privacy)."""

    mode: str = checked(  # none | local (each upload) | central (the round's sum) | fixed_sigma
        "none", lambda v: v in PRIVACY_MODES, f"allowed: {', '.join(PRIVACY_MODES)}"
    )
    clip_norm: float | None = checked(  # C: each update clipped to this L2 norm (null: none)
        None, lambda v: v is None or v > 0, "must be > 0 (or null: no clipping)"
    )
    noise_multiplier: float = checked(  # z: local / central noise std is z * C
        1.0, lambda v: v >= 0, "must be >= 0"
    )
    sigma: float = checked(  # fixed_sigma: noise std added to each upload (the seed's 0.01)
        0.01, lambda v: v >= 0, "must be >= 0"
    )
    delta: float = checked(  # the delta epsilon is reported at
        1e-5, lambda v: 0 < v < 1, "must be in (0, 1)"
    )
    adaptive: bool = False  # adapt C each round to a quantile of update norms (Andrew et al.)
    target_quantile: float = checked(  # adaptive: share of updates meant to be left unclipped
        0.5, lambda v: 0 < v < 1, "must be in (0, 1)"
    )

    @property
    def enabled(self) -> bool:
        return self.mode != "none"


@dataclass
class CompressionConfig:
    """``compression``: clients send sparse updates (indices + values)."""

    kind: str = checked(  # none | threshold (|change| > threshold) | topk (a fraction)
        "none", lambda v: v in COMPRESSIONS, f"allowed: {', '.join(COMPRESSIONS)}"
    )
    threshold: float = checked(  # threshold: entries whose change exceeds it are sent
        1e-3, lambda v: v >= 0, "must be >= 0"
    )
    fraction: float = checked(  # topk: share of the entries sent (largest changes)
        0.01, lambda v: 0 < v <= 1, "must be in (0, 1]"
    )
    error_feedback: bool = False  # add what was not sent to the client's next update
