"""Local-only: each client trains its own model alone; nothing is communicated.

A held-out client (``eval.holdout_clients``) has no federation to learn from: it trains the
shared initial model (the server's state, which never changes) alone on its own train split
for ``eval.finetune_epochs`` epochs, as a client's first rounds would. There is no global
model: the server's is the untrained initial one.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    NewcomerRule,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import finetuned


@register
class LocalOnly(Algorithm):
    """Every client starts from the shared initial model and keeps training its own copy."""

    name = "local"
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the initial model trained alone for eval.finetune_epochs epochs on its own "
        "train split (no federation to learn from)",
        source="fedsim's choice: local training is all a local-only client has, and the "
        "initial model is where every client starts",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = False  # the server holds the untrained initial model

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

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The initial model after ``finetune_epochs`` epochs on the newcomer's train split."""
        return finetuned(broadcast["params"], client, finetune_epochs, frozen=[])

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The initial model on a client's first round; nothing after (it trains its own)."""
        return super().download_nbytes(broadcast, payload, state) if state is None else 0
