"""The robust-aggregation stage (``aggregation.rule``, ``aggregation.anomaly_cosine``).

Server side only: the anomaly filter, then the robust rule instead of the weighted mean,
on each client's own sums (``robust_sums`` here; the rules' arithmetic is
``fedsim/deployment/robust.py``). It asks the clients
for their sums on their own, and for their flat updates where the filter or a selection
rule (krum, multikrum, bulyan) compares them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fedsim.algorithms.base import WeightedSum
from fedsim.config import AggregationConfig
from fedsim.deployment import robust
from fedsim.deployment.stages.base import (
    ClientSums,
    ServerAggregation,
    UploadStage,
    is_model_sum,
)

SELECTION_RULES = ("krum", "multikrum", "bulyan")


class RobustStage(UploadStage):
    needs_individual = True

    def __init__(self, config: AggregationConfig):
        self.config = config
        self.needs_delta = config.anomaly_cosine is not None or config.rule in SELECTION_RULES

    def server(self, aggregation: ServerAggregation) -> None:
        trained = aggregation.trained
        outcome = robust_sums(
            self.config,
            aggregation.individual,
            {c.client: c.upload.delta for c in trained if c.upload.delta is not None},
            aggregation.patterns,
        )
        aggregation.sums = outcome.sums
        if self.config.anomaly_cosine is not None:
            aggregation.metrics["anomaly_dropped"] = outcome.dropped
        if outcome.selected is not None:
            aggregation.metrics["robust_selected"] = outcome.selected


@dataclass
class ServerOutcome:
    """The sums the algorithm aggregates, and what the server stages decided."""

    sums: dict[str, WeightedSum]
    dropped: list[int] = field(default_factory=list)  # by the anomaly filter
    selected: list[int] | None = None  # by krum / multikrum / bulyan


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
