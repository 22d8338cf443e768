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

from typing import Any, ClassVar

from fedsim.algorithm_params.fedbabu import FedBABUParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    NewcomerRule,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import BodyShared, FineTunedBeforeTest


@register
class FedBABU(FineTunedBeforeTest, BodyShared):
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
