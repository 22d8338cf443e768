"""Plug-ins that fail on purpose, named by import path in tests (``failing_plugins:...``)."""

from __future__ import annotations

from typing import Any

from fedsim.algorithms.base import RoundContext, ServerState, WeightedSum
from fedsim.algorithms.fedavg import FedAvg


class FailsInRoundOne(FedAvg):
    """FedAvg whose aggregate raises in round 1: a run that fails after its folder exists."""

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        if context.round == 1:
            raise ValueError("aggregate broke\non purpose")
        return super().aggregate(state, sums, individual, context)
