"""Ditto: a personal model pulled towards the global one, beside plain FedAvg.

Li et al., ICML 2021; PFLlib ``servers/serverditto.py``, ``clients/clientditto.py``. Rules:
docs/algorithms.md, "ditto". Each round a sampled client
1. trains its personal model v for ``personal_epochs`` (PFLlib ``plocal_epochs``, 1) with
   v <- v - lr (grad f(v) + mu (v - w_t)), w_t the global model it received (PFLlib's
   ``PerturbedGradientDescent``: the pull is added to the gradient, not to the loss);
2. trains a copy of w_t normally (the worker's main pass) and uploads it; the server averages
   the uploads with weights n_i / sum n (FedAvg; its weighting and server optimizer keys).
Clients are evaluated with v, before training. v is the client's private state (a full model
per client, in the driver's client state store, spilled to disk beyond its budget). A client
without one starts v from the global model it receives (the initial model at round 0, as
PFLlib, where every personal model is a copy of the initial one).

The personal pass runs through ``ClientInfo.probe.train`` from ``client_finish``, so the
worker's single main pass stays the global copy's.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedsim.algorithm_params.ditto import DittoParams
from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState, ClientUpdate
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.pull import Pull
from fedsim.algorithms.registry import register
from fedsim.streams import DITTO_PERSONAL_KEY


@register
class Ditto(FedAvg):
    """FedAvg for the global model; each client keeps a personal model pulled towards it."""

    name = "ditto"
    Params = DittoParams

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Evaluate the personal model; the main pass trains the received global model."""
        plan = super().client_start(broadcast, payload, state, client)
        plan.eval_params = plan.train_params if state is None else state["personal"]
        return plan

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Train v with the pull to w_t; upload the trained global copy (FedAvg weights)."""
        if client.probe is None:
            raise RuntimeError("Ditto needs the worker's probe to train the personal model")
        received = plan.train_params
        personal = received if state is None else state["personal"]
        terms = Pull(received, self.federation.layout, self.params.mu, "gradient")
        new_personal, loss = client.probe.train(
            personal,
            epochs=self.params.personal_epochs,
            terms=terms,
            indices=plan.train_indices,
            key=DITTO_PERSONAL_KEY,
            label="personal",  # its loss and self.log values beside the global pass's
        )
        if not math.isfinite(loss):
            new_personal = personal.clone()  # a diverged personal pass keeps the old model
        update = super().client_finish(plan, trained, state, client)
        update.state = {"personal": new_personal}
        return update
