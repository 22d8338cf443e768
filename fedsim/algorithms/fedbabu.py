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
curve).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from fedsim.algorithm_params.fedbabu import FedBABUParams
from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import BodyShared
from fedsim.streams import FEDBABU_FINETUNE_KEY


@register
class FedBABU(BodyShared):
    """Body averaged under a frozen random head; fine-tuned (not kept) before evaluation."""

    name = "fedbabu"
    Params = FedBABUParams
    keeps_personal: ClassVar[bool] = False  # the head is the server's (initial) one

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
        epochs = self.params.finetune_epochs
        if client.evaluates and epochs > 0 and client.probe is not None:
            tuned, loss = client.probe.train(model, epochs=epochs, key=FEDBABU_FINETUNE_KEY)
            if math.isfinite(loss):
                plan.eval_params = tuned
        return plan
