"""Local-only: each client trains its own model alone; nothing is communicated."""

from __future__ import annotations

from typing import Any

import torch

from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
)
from fedsim.algorithms.registry import register


@register
class LocalOnly(Algorithm):
    """Every client starts from the shared initial model and keeps training its own copy."""

    name = "local"

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        own = broadcast["params"] if state is None else state["params"]
        return ClientPlan(train_params=own)

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate(state={"params": trained.clone()})

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The initial model on a client's first round; nothing after (it trains its own)."""
        return super().download_nbytes(broadcast, payload, state) if state is None else 0
