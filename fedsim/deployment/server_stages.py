"""The server-side arithmetic of the robust and noise stages (``stages/robust.py``,
``stages/noise.py``), run on the driver before ``aggregate``.

Here are the anomaly filter (drop updates whose cosine to the round's coordinate-wise
median update is below ``aggregation.anomaly_cosine``), the robust rule in place of the
weighted mean (``aggregation.rule``), and central noise (one draw per model sum and round).
What the algorithm receives is what it always receives, ``WeightedSum`` s: a robust result r
arrives as a sum of weight W (the kept clients' total) and value r * W, so ``mean()`` is r.

Which sums are means of the model upload comes from ``Algorithm.model_upload(...).sums``
(asked in ``decision.py``); every other sum (SCAFFOLD's control variates, FedDyn's drift)
is summed over the clients that passed the filter, as before.
"""

from __future__ import annotations

import fnmatch
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from fedsim.algorithms.base import WeightedSum
from fedsim.config import AggregationConfig
from fedsim.deployment import robust
from fedsim.deployment.privacy import gaussian_noise
from fedsim.streams import CENTRAL_NOISE_TAG

ClientSums = dict[str, tuple[float, torch.Tensor]]


@dataclass
class ServerOutcome:
    """The sums the algorithm aggregates, and what the server stages decided."""

    sums: dict[str, WeightedSum]
    dropped: list[int] = field(default_factory=list)  # by the anomaly filter
    selected: list[int] | None = None  # by krum / multikrum / bulyan


def is_model_sum(key: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def robust_sums(
    config: AggregationConfig,
    individual: dict[int, ClientSums],
    deltas: dict[int, torch.Tensor],
    patterns: tuple[str, ...],
) -> ServerOutcome:
    """Filter, then aggregate each client's own sums by ``config.rule`` (clients in id order).

    ``individual[c]``: client c's ``(weight, value)`` per sum key; ``deltas[c]``: its flat
    model update (needed by the filter and the selection rules).
    """
    clients = sorted(individual)
    dropped: list[int] = []
    if config.anomaly_cosine is not None and len(clients) > 1:
        rows = torch.stack([deltas[c] for c in clients])
        keep = set(robust.anomaly_keep(rows, config.anomaly_cosine))
        dropped = [c for i, c in enumerate(clients) if i not in keep]
        clients = [c for i, c in enumerate(clients) if i in keep]
    rule, f = config.rule, config.krum_f
    selected: list[int] | None = None
    if rule in ("krum", "multikrum", "bulyan") and not clients:
        selected = []  # the filter left no one: recorded as an empty pick, not left out
    elif rule in ("krum", "multikrum", "bulyan"):
        rows = torch.stack([deltas[c] for c in clients])
        if rule == "bulyan":
            picks = robust.bulyan_select(rows, f)
        else:
            m = 1 if rule == "krum" else (config.krum_m or max(1, len(clients) - f))
            picks = robust.krum_select(rows, f, m)
        selected = [clients[i] for i in picks]
    sums: dict[str, WeightedSum] = {}
    keys = sorted({k for c in clients for k in individual[c]})
    for key in keys:
        holders = [c for c in clients if key in individual[c]]
        model = is_model_sum(key, patterns)
        if model and selected is not None:
            holders = [c for c in holders if c in selected]
        if not holders:
            continue
        if model and rule in ("median", "trimmed_mean", "bulyan"):
            sums[key] = _coordinate_rule(rule, config, [individual[c][key] for c in holders], f)
        else:
            total = WeightedSum()
            for c in holders:
                total.add(*individual[c][key])
            sums[key] = total
    return ServerOutcome(sums, dropped, selected)


def _coordinate_rule(
    rule: str, config: AggregationConfig, entries: list[tuple[float, torch.Tensor]], f: int
) -> WeightedSum:
    weight = float(sum(w for w, _ in entries))
    rows = torch.stack([v.detach().reshape(-1) for _, v in entries])
    if rule == "median":
        value = robust.coordinate_median(rows)
    elif rule == "trimmed_mean":
        value = robust.trimmed_mean(rows, config.trim)
    else:  # bulyan's second stage on the clients its first stage chose
        value = robust.closest_to_median_mean(rows, len(entries) - 2 * f)
    shape = entries[0][1].shape
    return WeightedSum(weight=weight, value=value.reshape(shape) * weight)


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
