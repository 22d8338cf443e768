"""FedRoD: a generic model trained with the balanced softmax, and a personal head beside it.

Chen & Chao, "On Bridging Generic and Personalized Federated Learning for Image
Classification", ICLR 2022 (the balanced-softmax variant, no hypernetwork); PFLlib
``servers/serverrod.py``, ``clients/clientrod.py``. Rules: docs/algorithms.md, "fedrod".
The whole model (body and generic head g, the output layer) is averaged with n_i weights.
Each client also keeps a personal head p (a Linear like g; its private state, starting from
the initial model's g). Per minibatch, inside the main pass (``ClientTerms.objective``):
1. z = body(x); the model steps on CE(g(z) + log n_ic, y), the balanced softmax with the
   client's training class counts n_ic (an absent class gets -inf);
2. p steps (SGD at the client's lr) on CE(g(z).detach() + p(z.detach()), y), with the g(z)
   and z of step 1 (taken before the model's step, as PFLlib).
A client is evaluated with g(z) + p(z): as both heads are affine in z, that is the received
model with the output layer's weight and bias replaced by g's plus p's. Evaluated after its
round's training (``eval.when=after_training``), it is the trained model with g + p, p the
personal head its round trained (``kept_params``).

A held-out client (``eval.holdout_clients``) has no personal head: its p starts from the
initial model's g, as every client's, and takes ``eval.finetune_epochs`` epochs of the step
above on its own train split (plain SGD at the client's lr on CE(g(z) + p(z), y)) with the
received generic model frozen; it is evaluated with g + p. As g + p is affine in p, that is
SGD on the output layer of the model with head g + p, the rest frozen. The generic model
(the broadcast) is the global model.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    FederationInfo,
    NewcomerRule,
    ServerState,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.errors import ConfigError
from fedsim.sizes import nbytes
from fedsim.streams import NEWCOMER_FINETUNE_KEY
from lightning_modules.blocks import output_layer
from lightning_modules.flat_params import flat_ranges, gather
from lightning_modules.hooks import ClientTerms


class BalancedSoftmaxAndPersonalHead(ClientTerms):
    """The generic model's balanced-softmax loss; a step of the personal head per batch."""

    def __init__(self, class_counts: np.ndarray, head: torch.Tensor, shape: tuple, lr: float):
        self.log_prior = torch.log(torch.as_tensor(class_counts, dtype=torch.float32))
        self.head = head.detach().to(torch.float32, copy=True)  # [weight..., bias...]
        self.shape, self.lr = shape, lr

    def objective(
        self, module: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        x, y = batch
        z = module.features(x)
        logits = output_layer(module)(z)
        if self.head.device != z.device:
            self.head = self.head.to(z.device)
            self.log_prior = self.log_prior.to(z.device)
        loss = F.cross_entropy(logits + self.log_prior.to(logits.dtype), y)
        # the personal head's own step (PFLlib's opt_head), on the detached features
        rows, cols = self.shape
        weight = self.head[: rows * cols].view(rows, cols).detach().requires_grad_(True)
        bias = self.head[rows * cols :].detach().requires_grad_(True)
        with torch.enable_grad():
            personal = F.linear(z.detach().float(), weight, bias)
            personal_loss = F.cross_entropy(logits.detach().float() + personal, y)
            grad_w, grad_b = torch.autograd.grad(personal_loss, (weight, bias))
        with torch.no_grad():
            self.head[: rows * cols].sub_(grad_w.reshape(-1), alpha=self.lr)
            self.head[rows * cols :].sub_(grad_b, alpha=self.lr)
        return loss

    def trained_head(self) -> torch.Tensor:
        return self.head.detach().to("cpu", copy=True)


@register
class FedRoD(SharedPart):
    """The whole model averaged (balanced-softmax training); each client keeps a personal head."""

    name = "fedrod"
    Params = AlgorithmParams
    model_needs = ("features",)  # its objective reads the representation
    own_objective = (
        "the balanced softmax on the output layer of features(x), and its personal head's step"
    )
    keeps_personal = False  # everything is shared; the personal head is its own state
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the global (generic) model with head g + p, its personal head p from the "
        "initial head trained for eval.finetune_epochs epochs on its own train split by "
        "FedRoD's personal-head step, the generic model frozen",
        source="fedsim's choice: the personal-part family's rule on FedRoD's personal head "
        "(PFLlib's serverbase.py fine_tuning_new_clients fine-tunes the generic model "
        "instead and leaves p at the initial head)",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = True  # the generic model, trained by every client

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        super().__init__(params, federation)
        layout, head = federation.layout, list(federation.head_names)
        weights = [n for n in head if n.endswith("weight")]
        biases = [n for n in head if n.endswith("bias")]
        shapes = [layout.by_name[n].shape for n in head]
        if not (
            len(head) == 2 and weights and biases
            and layout.by_name[weights[0]].offset < layout.by_name[biases[0]].offset
            and len(shapes[0]) == 2 and shapes[1] == (shapes[0][0],)
        ):  # fmt: skip
            if federation.adapters is not None:  # an adapter's matrices: no class rows
                raise ConfigError(
                    "algorithm.name", "fedrod", "balances a classifier's output layer (one "
                    "Linear with a bias, a row per class), and this model trains a LoRA "
                    "adapter, which has none: FedRoD does not apply; pick another algorithm",
                )  # fmt: skip
            raise ConfigError(
                "algorithm.name",
                "fedrod",
                "needs an output layer that is one Linear with a bias (its personal head is "
                f"added to it); this model's is {', '.join(head) or 'empty'}",
            )
        self.head_ranges = flat_ranges(layout, head)
        self.head_shape = tuple(layout.by_name[weights[0]].shape)

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        return {"params": initial_params.clone(), "initial_head": self._head(initial_params)}

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        return {"params": state["params"], "initial_head": state["initial_head"]}

    def _head(self, params: torch.Tensor) -> torch.Tensor:
        return gather(params, self.head_ranges)

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Train the received model with the terms; evaluate it with g + p as its head."""
        model = broadcast["params"]
        personal = broadcast["initial_head"] if state is None else state["head"]
        combined = self.with_personal_head(model, personal)
        lr = client.probe.lr if client.probe is not None else 0.0
        terms = BalancedSoftmaxAndPersonalHead(client.class_counts, personal, self.head_shape, lr)
        return ClientPlan(train_params=model, eval_params=combined, terms=terms)

    def with_personal_head(self, model: torch.Tensor, personal: torch.Tensor) -> torch.Tensor:
        """``model`` with head g + p (a new tensor): g its output layer, p ``personal``."""
        combined = model.clone()
        start = 0
        for a, b in self.head_ranges:
            combined[a:b] += personal[start : start + b - a]
            start += b - a
        return combined

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        assert isinstance(plan.terms, BalancedSoftmaxAndPersonalHead)
        update = super().client_finish(plan, trained, state, client)
        update.state = {"head": plan.terms.trained_head()}
        return update

    def kept_params(
        self,
        plan: ClientPlan,
        trained: torch.Tensor,
        update: ClientUpdate,
        client: ClientInfo,
    ) -> torch.Tensor:
        """The trained model with head g + p, p the personal head the round trained."""
        assert update.state is not None
        return self.with_personal_head(trained, update.state["head"])

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The received model with head g + p, p from the initial head after
        ``finetune_epochs`` epochs of plain SGD at the client's lr on CE(g(z) + p(z), y) over
        its minibatches; body and g frozen. The gradient in p is the gradient in the output
        layer of the model with head g + p, so the loop steps that layer. Unadapted if a loss
        is not finite."""
        start = self.with_personal_head(broadcast["params"], broadcast["initial_head"])
        if finetune_epochs < 1:
            return start
        probe = client.probe
        if probe is None:
            raise RuntimeError("a FedRoD newcomer trains its head through the probe; it has none")
        tuned, lr = start.clone(), probe.lr
        for batch in probe.batches(finetune_epochs, key=NEWCOMER_FINETUNE_KEY):
            grad, loss = probe.gradient(tuned, batch)
            if not math.isfinite(loss):
                return start
            for a, b in self.head_ranges:
                tuned[a:b] -= lr * grad[a:b]
        return tuned

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The model; the initial head only for a client without a personal head yet (PFLlib's
        clients hold it from the start)."""
        sent = {"params": broadcast["params"]}
        if state is None:
            sent["initial_head"] = broadcast["initial_head"]
        return nbytes(sent) + nbytes(payload)
