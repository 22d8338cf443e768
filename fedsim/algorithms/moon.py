"""MOON: model-contrastive federated learning.

Li, He, Song, "Model-Contrastive Federated Learning", CVPR 2021; PFLlib
``servers/servermoon.py``, ``clients/clientmoon.py``. Rules: docs/algorithms.md, "moon".
FedAvg (n_i weights, the global model evaluated) whose local loss adds, per minibatch,
``mu * mean_x l_con`` with
``l_con = -log(exp(cos(z, z_glob)/tau) / (exp(cos(z, z_glob)/tau) + exp(cos(z, z_prev)/tau)))``:
z the representation the output layer reads (``FLModule.features``; PFLlib's, no projection
head), z_glob that of the received global model and z_prev that of the client's own model
after its previous local training (its private state; the received model before its first).
The paper's mu 1 and tau 0.5 are the defaults; PFLlib's (mu 0, tau 1) make it FedAvg.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedsim.algorithm_params.moon import MOONParams
from fedsim.algorithms.base import ClientInfo, ClientPlan, ClientState, ClientUpdate, NewcomerRule
from fedsim.algorithms.param_views import NamedViews
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from lightning_modules.blocks import output_layer
from lightning_modules.flat_params import ParamLayout
from lightning_modules.hooks import ClientTerms


class _Features(nn.Module):
    """``module.features`` as a forward, so ``functional_call`` can run it at other weights."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module.features(x)


class ModelContrastive(ClientTerms):
    """CE on the model's output plus mu times the model-contrastive loss of its features."""

    def __init__(
        self,
        global_params: torch.Tensor,
        previous_params: torch.Tensor,
        layout: ParamLayout,
        mu: float,
        tau: float,
    ):
        self.mu, self.tau = mu, tau
        self._global = NamedViews(global_params, layout)
        self._previous = NamedViews(previous_params, layout)

    def _features_at(self, views: NamedViews, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        tensors = views.on(x.device)
        # buffers as copies: a train-mode forward updates BatchNorm statistics in place
        buffers = {n for n, _ in module.named_buffers()}
        state = {f"module.{n}": (t.clone() if n in buffers else t) for n, t in tensors.items()}
        with torch.no_grad():
            return torch.func.functional_call(_Features(module), state, (x,))

    def objective(
        self, module: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        x, y = batch
        z = module.features(x)
        loss = F.cross_entropy(output_layer(module)(z), y)
        z_glob = self._features_at(self._global, module, x)
        z_prev = self._features_at(self._previous, module, x)
        positive = F.cosine_similarity(z, z_glob) / self.tau
        negative = F.cosine_similarity(z, z_prev) / self.tau
        # -log(e^p / (e^p + e^n)) = logsumexp(p, n) - p
        contrastive = (torch.logaddexp(positive, negative) - positive).mean()
        return loss + self.mu * contrastive


@register
class MOON(SharedPart):
    """FedAvg with the model-contrastive term against the global and the previous local model."""

    name = "moon"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Li, He, Song 2021: "
        "FedAvg's one global model (the contrastive term acts only in training)",
    )
    Params = MOONParams
    model_needs = ("features",)  # its objective reads the representation
    own_objective = (
        "cross-entropy on the output layer of features(x) plus mu times the model-contrastive term"
    )
    keeps_personal = False  # everything is shared; the previous model is its own state

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Train the received global model; mu 0 trains on cross-entropy alone (FedAvg)."""
        model = broadcast["params"]
        plan = ClientPlan(train_params=model)
        params = self.round_params(client)  # the round's mu and tau
        if params.mu > 0:
            previous = model if state is None else state["previous"]
            plan.terms = ModelContrastive(
                model, previous, self.federation.layout, params.mu, params.tau
            )
        return plan

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        update = super().client_finish(plan, trained, state, client)
        update.state = {"previous": trained}
        return update
