"""LG-FedAvg: local representations, a global head: the mirror of FedPer.

Liang et al., "Think Locally, Act Globally: Federated Learning with Local and Global
Representations", 2020; PFLlib ``servers/serverlg.py``, ``clients/clientlg.py``. Rules:
docs/algorithms.md, "lgfedavg". The top ``global_layers`` named blocks (1: the output layer,
as PFLlib) are shared and averaged with n_i weights; every block below stays on its client
(its private state; a client without one starts from the initial model's). Clients train the
whole model and are evaluated with their own lower blocks under the received global head.

A held-out client (``eval.holdout_clients``) trains lower blocks of its own under the global
top blocks: the server's (the initial model's, never trained) for ``eval.finetune_epochs``
epochs on its train split, the top blocks frozen (the official code tests unseen data on an
ensemble of every client's local model, ``test_img_ensemble_all``, which no server holds).
The server's model is no global model: its lower blocks never train.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedsim.algorithm_params.lgfedavg import LGFedAvgParams
from fedsim.algorithms.base import ClientInfo, FederationInfo, NewcomerRule
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.errors import ConfigError


@register
class LGFedAvg(SharedPart):
    """The top blocks averaged; each client keeps the blocks below."""

    name = "lgfedavg"
    Params = LGFedAvgParams
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the global top blocks over the server's (initial) lower blocks, those trained "
        "for eval.finetune_epochs epochs on its own train split, top blocks frozen",
        source="fedsim's choice: the personal-part family's rule (the official code, main_lg.py "
        "test_img_ensemble_all, tests unseen data on an ensemble of every client's local "
        "model, which no server holds)",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = False  # the server's lower blocks never train

    def __init__(self, params: LGFedAvgParams, federation: FederationInfo):
        blocks = federation.block_names
        if params.global_layers > len(blocks):
            raise ConfigError(
                "algorithm.global_layers",
                params.global_layers,
                f"the model has {len(blocks)} blocks: must be in 1..{len(blocks)}",
            )
        top = blocks[len(blocks) - params.global_layers :]
        self.global_names = [n for b in top for n in federation.block_parameters[b]]
        super().__init__(params, federation)

    def shared_names(self) -> list[str]:
        return self.global_names

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The server's lower blocks trained under the global top blocks (frozen)."""
        return self.newcomer_personal(broadcast, client, finetune_epochs)
