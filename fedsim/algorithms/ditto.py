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

A held-out client (``eval.holdout_clients``) starts v from the global model w, as a client
without v does, and trains it ``eval.finetune_epochs`` epochs on its own train split by the
personal pass's rule (the pull mu (v - w) to w); it keeps nothing. After training
(``eval.when: after_training``) a client keeps its new v.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.ditto import DittoParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientUpdate,
    NewcomerRule,
)
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.pull import Pull
from fedsim.algorithms.registry import register
from fedsim.streams import DITTO_PERSONAL_KEY, NEWCOMER_FINETUNE_KEY


@register
class Ditto(FedAvg):
    """FedAvg for the global model; each client keeps a personal model pulled towards it."""

    name = "ditto"
    Params = DittoParams
    newcomer = NewcomerRule(
        rule="a personal model v started from the global model w and trained "
        "eval.finetune_epochs epochs on its own train split with Ditto's pull mu (v - w) to w",
        source="fedsim's choice: Ditto's own personal objective, from w as a client without v "
        "starts (PFLlib's serverbase.py fine_tuning_new_clients fine-tunes w on plain "
        "cross-entropy instead)",
        adapts=True,
    )

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

    def personal_pass(
        self,
        probe: ClientProbe,
        personal: torch.Tensor,
        received: torch.Tensor,
        epochs: int,
        mu: float,
        indices: np.ndarray | None = None,
        key: int = DITTO_PERSONAL_KEY,
        label: str | None = None,
    ) -> torch.Tensor:
        """v after ``epochs`` of SGD with the pull mu (v - w) to ``received`` (w); a pass whose
        loss diverges gives back (a copy of) ``personal``."""
        terms = Pull(received, self.federation.layout, mu, "gradient")
        new_personal, loss = probe.train(
            personal, epochs=epochs, terms=terms, indices=indices, key=key, label=label
        )
        if not math.isfinite(loss):
            return personal.clone()  # a diverged personal pass keeps the old model
        return new_personal

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Train v with the pull to w_t; upload the trained global copy (FedAvg weights)."""
        if client.probe is None:
            raise RuntimeError("Ditto needs the worker's probe to train the personal model")
        received = plan.train_params
        personal = received if state is None else state["personal"]
        params = self.round_params(client)  # the round's mu and personal epochs
        new_personal = self.personal_pass(
            client.probe,
            personal,
            received,
            params.personal_epochs,
            params.mu,
            indices=plan.train_indices,
            label="personal",  # its loss and self.log values beside the global pass's
        )
        update = super().client_finish(plan, trained, state, client)
        update.state = {"personal": new_personal}
        return update

    def kept_params(
        self, plan: ClientPlan, trained: torch.Tensor, update: ClientUpdate, client: ClientInfo
    ) -> torch.Tensor:
        """The new personal model v (the main pass's result is the global copy it uploads)."""
        return update.state["personal"]

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """v from w, trained ``finetune_epochs`` epochs with the pull to w (0: w as it is)."""
        w = self.global_params(broadcast)
        if finetune_epochs == 0:
            return w
        if client.probe is None:
            raise RuntimeError("Ditto needs the worker's probe to adapt a newcomer's model")
        mu = self.round_params(client).mu
        return self.personal_pass(
            client.probe, w, w, finetune_epochs, mu, key=NEWCOMER_FINETUNE_KEY
        )
