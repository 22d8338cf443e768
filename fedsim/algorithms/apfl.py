"""APFL: adaptive personalized FL, a per-client mixture of a local and the global model.

Deng, Kamani, Mahdavi, "Adaptive Personalized Federated Learning", 2020; PFLlib
``servers/serverapfl.py``, ``clients/clientapfl.py`` (its alpha step follows FedTorch, the
authors' group's code). Rules: docs/algorithms.md, "apfl". The global model w is averaged
with n_i weights; each client keeps a personal model v and its mixing weight alpha (private
state; v starts as the received model, alpha as ``alpha``). Per minibatch of the client's
own loop (``OwnLoop``: plain SGD at the client's lr eta):

- ``update: pfllib`` (default, PFLlib): w <- w - eta grad f(w); v <- v - eta grad f(v) (v on
  its own loss); g = <v - w, alpha grad f(v) + (1 - alpha) grad f(w)> + 0.02 alpha at the
  stepped models; alpha <- clip(alpha - alpha_lr g, 0, 1). After the epochs
  v <- (1 - alpha) w + alpha v. Evaluated with v.
- ``update: paper`` (Algorithm 1 of the paper): with vbar = alpha v + (1 - alpha) w,
  w <- w - eta grad f(w); v <- v - eta alpha grad f(vbar); alpha <- clip(alpha - alpha_lr
  <v - w, grad f(vbar)>, 0, 1), all from the batch's starting values; v stays separate.
  Evaluated with alpha v + (1 - alpha) w, w the received global model.

A held-out client (``eval.holdout_clients``) runs that loop for ``eval.finetune_epochs``
epochs from v = w and alpha = ``alpha`` (a client's first round, uploading nothing) and is
evaluated as a client holding the resulting v and alpha is. After training
(``eval.when: after_training``) a client keeps its new v (``pfllib``) or its new
alpha v + (1 - alpha) w with its trained w (``paper``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.apfl import APFLParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientUpdate,
    NewcomerRule,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import OwnLoop
from fedsim.streams import NEWCOMER_FINETUNE_KEY

ALPHA_DECAY = 0.02  # PFLlib's (FedTorch's) term 0.02 alpha in alpha's gradient


@register
class APFL(OwnLoop):
    """The global model averaged; each client mixes it with its personal model by alpha."""

    name = "apfl"
    Params = APFLParams
    keeps_personal = False  # everything is shared; v and alpha are its own state
    newcomer = NewcomerRule(
        rule="APFL's local loop from v = w and the initial alpha (v, the global model w and "
        "alpha adapted as APFL adapts them) for eval.finetune_epochs epochs on its own train "
        "split, evaluated as a client is with that state (pfllib: the mixture v; paper: "
        "alpha v + (1 - alpha) w with the global w)",
        source="fedsim's choice: APFL's own client update, as a client's first round (v and "
        "alpha start as they do for a client without them); PFLlib's serverbase.py "
        "fine_tuning_new_clients fine-tunes w on plain cross-entropy instead",
        adapts=True,
    )

    def mixture(self, v: torch.Tensor, w: torch.Tensor, alpha: float) -> torch.Tensor:
        """alpha v + (1 - alpha) w on the parameters; v's float buffers."""
        mixed = torch.lerp(w, v, alpha)
        if self.param_mask is not None:
            mixed[~self.param_mask] = v[~self.param_mask]
        return mixed

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        w = broadcast["params"]
        plan = ClientPlan(train_params=w, epochs=0)  # trained in client_finish
        if state is not None:
            v, alpha = state["personal"], float(state["alpha"])
            plan.eval_params = v if self.params.update == "pfllib" else self.mixture(v, w, alpha)
        return plan

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        probe = self.needs_probe(client)
        w = plan.train_params
        v = w if state is None else state["personal"]
        alpha = self.params.alpha if state is None else float(state["alpha"])
        batches = [b for epoch in self.epoch_batches(probe, plan, client) for b in epoch]
        alpha_lr = self.round_params(client).alpha_lr  # the round's
        w, v, alpha, mean_loss = self.local_loop(probe, batches, w, v, alpha, alpha_lr)
        if not (math.isfinite(mean_loss) and math.isfinite(alpha)):
            return ClientUpdate(train_loss=float("nan"))
        return ClientUpdate(
            sums=self.shared_sums(w, plan, client),
            state={"personal": v, "alpha": alpha},
            train_loss=mean_loss,
        )

    def local_loop(
        self,
        probe: ClientProbe,
        batches: list[np.ndarray],
        w: torch.Tensor,
        v: torch.Tensor,
        alpha: float,
        alpha_lr: float | None,
    ) -> tuple[torch.Tensor, torch.Tensor, float, float]:
        """A client's steps on ``batches`` from (w, v, alpha), as in the module doc: the new
        (w, v, alpha) and the mean loss of w's steps; ``pfllib``: v is then the mixture it
        keeps. ``w`` and ``v`` are not modified; ``alpha_lr``: the round's (None: the lr)."""
        lr = probe.lr
        alpha_lr = lr if alpha_lr is None else alpha_lr
        paper = self.params.update == "paper"
        w, v = w.clone(), v.clone()
        losses = []
        for batch in batches:
            grad_w, loss = probe.gradient(w, batch)
            losses.append(loss)
            if paper:
                grad_bar, _ = probe.gradient(self.mixture(v, w, alpha), batch)
                grad_alpha = float(torch.dot((v - w).double(), grad_bar.double()))
                w.sub_(grad_w, alpha=lr)
                v.sub_(grad_bar, alpha=lr * alpha)
            else:
                w.sub_(grad_w, alpha=lr)
                grad_v, _ = probe.gradient(v, batch)
                v.sub_(grad_v, alpha=lr)
                direction = torch.lerp(grad_w, grad_v, alpha)  # alpha gv + (1 - alpha) gw
                grad_alpha = float(torch.dot((v - w).double(), direction.double()))
                grad_alpha += ALPHA_DECAY * alpha
            alpha = min(max(alpha - alpha_lr * grad_alpha, 0.0), 1.0)
        mean_loss = sum(losses) / max(len(losses), 1)
        if not paper and math.isfinite(mean_loss) and math.isfinite(alpha):
            v = self.mixture(v, w, alpha)
        return w, v, alpha, mean_loss

    def kept_params(
        self, plan: ClientPlan, trained: torch.Tensor, update: ClientUpdate, client: ClientInfo
    ) -> torch.Tensor:
        """The personal model after the round: ``pfllib``: v, the mixture it keeps;
        ``paper``: alpha v + (1 - alpha) w with its new alpha, v and local w (the model it
        uploads; the main pass does not run, so ``trained`` is the received model)."""
        v, alpha = update.state["personal"], float(update.state["alpha"])
        if self.params.update == "pfllib":
            return v
        return self.mixture(v, update.sums["shared"][1], alpha)

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """APFL's local loop from v = w and the run's alpha for ``finetune_epochs`` epochs of
        the newcomer's batches, then evaluated as a client holding that state is at its next
        round (``pfllib``: v, the mixture with its local w; ``paper``: alpha v + (1 - alpha) w,
        w the global model). 0 epochs, or a diverged loop: the global model as it is."""
        w = self.global_params(broadcast)
        if finetune_epochs == 0:
            return w
        probe = self.needs_probe(client)
        batches = probe.batches(finetune_epochs, key=NEWCOMER_FINETUNE_KEY)
        alpha_lr = self.round_params(client).alpha_lr
        _, v, alpha, loss = self.local_loop(probe, batches, w, w, self.params.alpha, alpha_lr)
        if not (math.isfinite(loss) and math.isfinite(alpha)):
            return w
        state = {"personal": v, "alpha": alpha}
        plan = self.client_start(broadcast, payload, state, client)
        return plan.eval_params
