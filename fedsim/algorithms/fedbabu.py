"""FedBABU: the body is trained under a fixed random head; the head is fine-tuned to evaluate.

Oh, Kim, Yun, "FedBABU: Toward Enhanced Representation for Federated Image Classification",
ICLR 2022; PFLlib ``servers/serverbabu.py``, ``clients/clientbabu.py``. Rules:
docs/algorithms.md, "fedbabu". The head (the output layer) stays at its random
initialisation, the same for every client, and is never trained nor sent during training;
clients train the body with it frozen (``ClientPlan.frozen``) and the server averages bodies
with n_i weights. To evaluate, a client fine-tunes the whole model (body and head) from the
received body and the initial head for ``finetune_epochs`` epochs on its training split
(``ClientInfo.probe.train``, only when it is evaluated) and tests that model; the fine-tuned
model is not kept. ``finetune_epochs: 0`` evaluates body + random head (PFLlib's per-round
curve). Evaluated after its round's training (``eval.when=after_training``), a client
fine-tunes the body it trained under the initial head the same way (``kept_params``).

A held-out client (``eval.holdout_clients``) is evaluated the way every client is: the
received body and the initial head fine-tuned together, for ``eval.finetune_epochs`` epochs.
The body under the fixed head is a global model (it is what the body was trained with).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from fedsim.algorithm_params.fedbabu import FedBABUParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    NewcomerRule,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import BodyShared, finetuned
from fedsim.streams import FEDBABU_FINETUNE_KEY


@register
class FedBABU(BodyShared):
    """Body averaged under a frozen random head; fine-tuned (not kept) before evaluation."""

    name = "fedbabu"
    Params = FedBABUParams
    keeps_personal: ClassVar[bool] = False  # the head is the server's (initial) one
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the global body and the initial head fine-tuned together for "
        "eval.finetune_epochs epochs on its own train split (FedBABU's evaluation)",
        source="the paper's: Oh et al. 2022 fine-tune body and head before evaluating every "
        "client (PFLlib clientbabu.py fine_tune, and serverbase.py fine_tuning_new_clients)",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = True  # the averaged body under the fixed head

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Train the body under the initial head; evaluate the fine-tuned whole model."""
        model = broadcast["params"]
        plan = ClientPlan(train_params=model, frozen=self.head_names)
        if client.evaluates:
            tuned = self.fine_tuned(model, client)
            if tuned is not model:
                plan.eval_params = tuned
        return plan

    def fine_tuned(self, model: torch.Tensor, client: ClientInfo) -> torch.Tensor:
        """``model`` (body and head) after ``finetune_epochs`` epochs on the client's train
        split; ``model`` itself when there are none, no probe, or the pass diverged."""
        epochs = self.params.finetune_epochs
        if epochs > 0 and client.probe is not None:
            tuned, loss = client.probe.train(model, epochs=epochs, key=FEDBABU_FINETUNE_KEY)
            if math.isfinite(loss):
                return tuned
        return model

    def kept_params(
        self,
        plan: ClientPlan,
        trained: torch.Tensor,
        update: ClientUpdate,
        client: ClientInfo,
    ) -> torch.Tensor:
        """eval.when=after_training: the evaluation's fine-tune, which waited for the round's
        training (``client.evaluates`` was False), from the trained body and initial head."""
        return self.fine_tuned(trained, client)

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The received body and the initial head, fine-tuned together."""
        return finetuned(broadcast["params"], client, finetune_epochs, frozen=[])
