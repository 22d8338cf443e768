"""The ``tracking`` section: where a run is mirrored besides its run folder (Weights &
Biases, ``tracking.wandb``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedsim.checks import checked


def _wandb_params(value: Any) -> bool:
    """``tracking.wandb.params``: names (no dots: W&B shows nested config with dots) to
    plain values, so each is one column of W&B's runs table and parallel coordinates."""
    plain = (str, int, float, bool, type(None))
    return isinstance(value, dict) and all(
        isinstance(k, str) and k and "." not in k and isinstance(v, plain) for k, v in value.items()
    )


@dataclass
class WandbConfig:
    """``tracking.wandb``: Weights & Biases logging (fedsim/tracking/wandb_sink.py)."""

    enabled: bool = False  # mirror the run to Weights & Biases
    project: str = checked(  # the W&B project
        "fedsim", lambda v: bool(v.strip()), "must be a non-empty string"
    )
    entity: str | None = None  # the W&B team or user; null: your default entity
    group: str | None = None  # runs of one sweep or comparison side by side
    tags: list[str] = checked(  # W&B run tags
        predicate=lambda v: isinstance(v, list) and all(isinstance(t, str) for t in v),
        allowed="must be a list of strings",
        factory=list,
    )
    mode: str = checked(  # online | offline | disabled; online falls back to offline
        "online",
        lambda v: v in ("online", "offline", "disabled"),
        "allowed: online, offline, disabled",
    )
    max_client_series: int = checked(  # clients 0..N-1 drawn in the per-client charts
        20, lambda v: v >= 0, "must be >= 0"
    )
    params: dict[str, Any] = checked(  # top-level W&B config keys: a search's sampled values
        predicate=_wandb_params,
        allowed="must map names without '.' to a string, number, true/false or null",
        factory=dict,
    )


@dataclass
class TrackingConfig:
    """``tracking``: where a run is mirrored besides its run folder."""

    wandb: WandbConfig = field(default_factory=WandbConfig)
