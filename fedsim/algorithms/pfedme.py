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

A held-out client (``eval.holdout_clients``) runs that loop from the global model for
``eval.finetune_epochs`` epochs (a client's first round, uploading nothing) and is evaluated
with its theta (``evaluate: global``: the global model). After training
(``eval.when: after_training``) a client keeps its new theta (``evaluate: global``: its
trained w).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.pfedme import PFedMeParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientUpdate,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import OwnLoop, shared_mean
from fedsim.streams import NEWCOMER_FINETUNE_KEY


@register
class PFedMe(OwnLoop):
    """Local models pulled by personal models; the server mixes their mean in by beta."""

    name = "pfedme"
    Params = PFedMeParams
    keeps_personal = False  # everything is shared; theta is its own state
    newcomer = NewcomerRule(
        rule="the personal model theta of pFedMe's local loop (K steps per batch on its "
        "Moreau-envelope problem, pulled to a local w that starts from the global model) "
        "over eval.finetune_epochs epochs of its own train split (evaluate: global: the "
        "global model as it is)",
        source="fedsim's choice: pFedMe's own personalization, as a client's first round "
        "(theta and w start from the global model as they do for every client); PFLlib's "
        "serverbase.py fine_tuning_new_clients fine-tunes w on plain cross-entropy instead",
        adapts=True,
    )

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        mean = shared_mean(sums)
        if mean is None:
            return state
        beta = context.algorithm_params.beta  # the round's
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
        batches = [b for epoch in self.epoch_batches(probe, plan, client) for b in epoch]
        w, theta, mean_loss = self.local_loop(
            probe, batches, plan.train_params, self.round_params(client)
        )
        if not math.isfinite(mean_loss):
            return ClientUpdate(train_loss=mean_loss)
        return ClientUpdate(
            sums=self.shared_sums(w, plan, client),
            state={"personal": theta},
            train_loss=mean_loss,
        )

    def local_loop(
        self,
        probe: ClientProbe,
        batches: list[np.ndarray],
        x: torch.Tensor,
        p: PFedMeParams,
    ) -> tuple[torch.Tensor, torch.Tensor, float]:
        """A client's loop on ``batches`` from the received model ``x`` (module doc): the local
        model w it uploads, the personal model theta it keeps, and the mean loss. ``x`` is not
        modified; ``p``: the round's params."""
        lr = probe.lr
        w = x.clone()
        theta = w.clone()
        losses = []
        for batch in batches:
            for _ in range(p.K):
                grad, loss = probe.gradient(theta, batch)
                pull = self.masked((theta - w).mul_(p.lamda).add_(theta, alpha=p.mu))
                theta.sub_(grad.add_(pull), alpha=p.personal_lr)
            losses.append(loss)  # f(theta) before the batch's last inner step
            w.sub_(self.masked(w - theta), alpha=lr * p.lamda)
        return w, theta, sum(losses) / max(len(losses), 1)

    def kept_params(
        self, plan: ClientPlan, trained: torch.Tensor, update: ClientUpdate, client: ClientInfo
    ) -> torch.Tensor:
        """``evaluate: personal``: the new theta; ``global``: the local model w it uploads
        (the main pass does not run, so ``trained`` is the received model)."""
        if self.params.evaluate == "personal":
            return update.state["personal"]
        return update.sums["shared"][1]

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """``evaluate: personal``: theta of pFedMe's loop from the global model for
        ``finetune_epochs`` epochs of the newcomer's batches (0 epochs, or a diverged loop:
        the global model); ``evaluate: global``: the global model, as clients are."""
        x = self.global_params(broadcast)
        if finetune_epochs == 0 or self.params.evaluate == "global":
            return x
        probe = self.needs_probe(client)
        batches = probe.batches(finetune_epochs, key=NEWCOMER_FINETUNE_KEY)
        _, theta, loss = self.local_loop(probe, batches, x, self.round_params(client))
        return theta if math.isfinite(loss) else x
