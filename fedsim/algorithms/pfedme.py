"""pFedMe: personalized FL with Moreau envelopes.

T Dinh, Tran, Nguyen, "Personalized Federated Learning with Moreau Envelopes", NeurIPS 2020;
PFLlib ``servers/serverpFedMe.py``, ``clients/clientpFedMe.py``,
``optimizers/fedoptimizer.py``. Rules: docs/algorithms.md, "pfedme". A client starts its
local model w and its personal model theta from the received global model; per minibatch of
its own loop (``OwnLoop``), K times on that batch:
theta <- theta - personal_lr (grad f(theta) + lamda (theta - w) + mu theta), then
w <- w - eta lamda (w - theta) (eta: the client's lr). It uploads w and keeps theta. Server:
x <- (1 - beta) x + beta sum_i n_i w_i / sum n. Evaluated with theta, the personal model of
its last training (``evaluate: personal``, the paper's), or with the global model
(``evaluate: global``: what PFLlib's evaluation measures, see docs). PFLlib's default
beta 0 never moves the global model; fedsim's is the paper's 1.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedsim.algorithm_params.pfedme import PFedMeParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import OwnLoop, shared_mean


@register
class PFedMe(OwnLoop):
    """Local models pulled by personal models; the server mixes their mean in by beta."""

    name = "pfedme"
    Params = PFedMeParams
    keeps_personal = False  # everything is shared; theta is its own state

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        round_idx: int,
    ) -> ServerState:
        mean = shared_mean(sums)
        if mean is None:
            return state
        beta = self.params.beta
        if beta == 1.0:
            return {**state, "params": mean}
        return {**state, "params": torch.lerp(state["params"], mean, beta)}

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        x = broadcast["params"]
        plan = ClientPlan(train_params=x, epochs=0)  # trained in client_finish
        if self.params.evaluate == "personal" and state is not None:
            plan.eval_params = state["personal"]
        return plan

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        probe = self.needs_probe(client)
        p = self.params
        lr = probe.lr
        w = plan.train_params.clone()
        theta = w.clone()
        losses = []
        for batches in self.epoch_batches(probe, plan, client):
            for batch in batches:
                for _ in range(p.K):
                    grad, loss = probe.gradient(theta, batch)
                    pull = self.masked((theta - w).mul_(p.lamda).add_(theta, alpha=p.mu))
                    theta.sub_(grad.add_(pull), alpha=p.personal_lr)
                losses.append(loss)  # f(theta) before the batch's last inner step
                w.sub_(self.masked(w - theta), alpha=lr * p.lamda)
        mean_loss = sum(losses) / max(len(losses), 1)
        if not math.isfinite(mean_loss):
            return ClientUpdate(train_loss=mean_loss)
        return ClientUpdate(
            sums=self.shared_sums(w, plan, client),
            state={"personal": theta},
            train_loss=mean_loss,
        )
