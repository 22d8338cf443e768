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
"""

from __future__ import annotations

import math
from typing import Any

import torch

from fedsim.algorithm_params.apfl import APFLParams
from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState, ClientUpdate
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import OwnLoop

ALPHA_DECAY = 0.02  # PFLlib's (FedTorch's) term 0.02 alpha in alpha's gradient


@register
class APFL(OwnLoop):
    """The global model averaged; each client mixes it with its personal model by alpha."""

    name = "apfl"
    Params = APFLParams
    keeps_personal = False  # everything is shared; v and alpha are its own state

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
        lr = probe.lr
        alpha_lr = lr if self.params.alpha_lr is None else self.params.alpha_lr
        paper = self.params.update == "paper"
        w = plan.train_params.clone()
        v = w.clone() if state is None else state["personal"].clone()
        alpha = self.params.alpha if state is None else float(state["alpha"])
        losses = []
        for batches in self.epoch_batches(probe, plan, client):
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
        if not (math.isfinite(mean_loss) and math.isfinite(alpha)):
            return ClientUpdate(train_loss=float("nan"))
        if not paper:
            v = self.mixture(v, w, alpha)
        return ClientUpdate(
            sums=self.shared_sums(w, plan, client),
            state={"personal": v, "alpha": alpha},
            train_loss=mean_loss,
        )
