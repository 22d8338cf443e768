"""Ditto: a personal model pulled towards the global one, beside plain FedAvg.

Li et al., ICML 2021; PFLlib ``servers/serverditto.py``, ``clients/clientditto.py``. Rules:
ALGORITHMS.md, "Baselines". Each round a sampled client
1. trains its personal model v for ``personal_epochs`` (PFLlib ``plocal_epochs``, 1) with
   v <- v - lr (grad f(v) + mu (v - w_t)), w_t the global model it received (PFLlib's
   ``PerturbedGradientDescent``: the pull is added to the gradient, not to the loss);
2. trains a copy of w_t normally (the worker's main pass) and uploads it; the server averages
   the uploads with weights n_i / sum n (FedAvg).
Clients are evaluated with v, before training. v is the client's private state (a full model
per client, in the driver's client state store, spilled to disk beyond its budget). A client
without one starts v from the global model it receives (the initial model at round 0, as
PFLlib, where every personal model is a copy of the initial one).

The personal pass runs through ``ClientInfo.probe.train`` from ``client_finish``, so the
worker's single main pass stays the global copy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from fedsim.algorithms.base import (
    AlgorithmParams,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
)
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.registry import register
from fedsim.errors import ConfigError
from lightning_modules.flat_params import ParamLayout

PERSONAL_KEY = 13  # seeds the personal pass apart from the main training


@dataclass
class DittoParams(AlgorithmParams):
    """``algorithm.*`` keys of Ditto."""

    mu: float = 0.1  # pull of the personal model towards the global model (Ditto's lambda)
    personal_epochs: int = 1  # epochs of personal training per round (PFLlib plocal_epochs)

    def __post_init__(self) -> None:
        if not self.mu >= 0:
            raise ConfigError("algorithm.mu", self.mu, "must be >= 0")
        if self.personal_epochs < 1:
            raise ConfigError("algorithm.personal_epochs", self.personal_epochs, "must be >= 1")


@dataclass
class ProxGradient:
    """Client terms: grad += mu (p - anchor) for every parameter (a perturbed SGD step)."""

    anchor: torch.Tensor  # flat model the parameters are pulled to
    layout: ParamLayout
    mu: float
    _views: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    def anchor_of(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The anchor's tensor ``name`` on ``like``'s device (moved once)."""
        view = self._views.get(name)
        if view is None or view.device != like.device:
            view = self.layout.view(self.anchor, name).to(like.device)
            self._views[name] = view
        return view

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor | None:
        return None

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        for name, p in params.items():
            if p.grad is not None:
                p.grad.add_(p.detach() - self.anchor_of(name, p), alpha=self.mu)


@register
class Ditto(FedAvg):
    """FedAvg for the global model; each client keeps a personal model pulled towards it."""

    name = "ditto"
    Params = DittoParams
    uses_client_state = True  # the personal model v

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Evaluate the personal model; the main pass trains the received global model."""
        received = broadcast["params"]
        personal = received if state is None else state["personal"]
        return ClientPlan(train_params=received, eval_params=personal)

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Train v with the pull to w_t; upload the trained global copy (FedAvg weights)."""
        if client.probe is None:
            raise RuntimeError("Ditto needs the worker's probe to train the personal model")
        received = plan.train_params
        personal = received if state is None else state["personal"]
        terms = ProxGradient(received, self.federation.layout, self.params.mu)
        new_personal, loss = client.probe.train(
            personal, epochs=self.params.personal_epochs, terms=terms, key=PERSONAL_KEY
        )
        if not math.isfinite(loss):
            new_personal = personal.clone()  # a diverged personal pass keeps the old model
        update = super().client_finish(plan, trained, state, client)
        update.state = {"personal": new_personal}
        return update
