"""FedRep: a shared body (representation), a personal head; head epochs, then body epochs.

Collins et al., "Exploiting Shared Representations for Personalized Federated Learning",
ICML 2021; PFLlib ``servers/serverrep.py``, ``clients/clientrep.py``. Rules:
docs/algorithms.md, "fedrep". The head is the model's output layer (its top named block);
the body is everything else. Each round a sampled client
1. trains its own head for ``head_epochs`` epochs with the received body frozen (PFLlib's
   ``plocal_epochs``, 1; the paper uses many), through ``ClientInfo.probe.train``;
2. trains the body for ``client.epochs`` with that head frozen (the worker's main pass,
   ``ClientPlan.frozen``), and uploads the body; the server averages bodies with n_i weights.
A client is evaluated with the received body and its own head, before training. The head is
its private state; a client without one starts from the initial model's head.

A held-out client (``eval.holdout_clients``) fits a head of its own on the received body: the
server's head (the initial model's) trained for ``eval.finetune_epochs`` epochs on its train
split with the body frozen, as the official code's new-client experiment fits a head on the
learned representation. The server's model is no global model: its head never trains.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from fedsim.algorithm_params.fedrep import FedRepParams
from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState, NewcomerRule
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import BodyShared
from fedsim.streams import FEDREP_HEAD_KEY


@register
class FedRep(BodyShared):
    """Body averaged; each client keeps its head, trained before the body each round."""

    name = "fedrep"
    Params = FedRepParams
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the global body with the server's (initial) head fine-tuned for "
        "eval.finetune_epochs epochs on its own train split, body frozen",
        source="after the official code's new-client experiment (Collins et al. 2021, "
        "FedRep_linear_sims.ipynb: a new client fits only its head on the learned body)",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = False  # the server's head never trains

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Evaluate body + own head; train the head (body frozen), then the body (head frozen)."""
        model = self.client_model(broadcast, state)
        plan = ClientPlan(train_params=model, frozen=self.head_names)
        epochs = self.round_params(client).head_epochs  # the round's
        if client.trains and epochs > 0 and client.probe is not None:
            tuned, loss = client.probe.train(
                model, epochs=epochs, frozen=self.shared_names(), key=FEDREP_HEAD_KEY
            )
            if math.isfinite(loss):  # a diverged head pass trains the body from the old head
                plan.train_params, plan.eval_params = tuned, model
        return plan

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The received body under the server's head, the head fine-tuned (body frozen)."""
        return self.newcomer_personal(broadcast, client, finetune_epochs)
