"""Per-FedAvg: MAML-style FedAvg; one step of personalization before evaluation.

Fallah, Mokhtari, Ozdaglar, "Personalized Federated Learning with Theoretical Guarantees: A
Model-Agnostic Meta-Learning Approach", NeurIPS 2020; PFLlib ``servers/serverperavg.py``,
``clients/clientperavg.py`` (first order). Rules: docs/algorithms.md, "perfedavg". In its
own loop (``OwnLoop``) a client cuts each epoch's shuffled training split into meta-batches
of 2 x ``client.batch_size`` (the last may be smaller), halves D1 and D2, and per meta-batch:
theta' = theta - alpha grad f(theta; D1); g = grad f(theta'; D2) (``order: first``), or
g = grad f(theta'; D2) - alpha H(theta; D1) grad f(theta'; D2) (``order: hessian_free``, the
Hessian-vector product by a central difference of gradients); theta <- theta - beta g.
It uploads theta; the server averages with n_i weights. Evaluated with one step
theta - alpha grad f(theta; B) on one seeded minibatch B of its training split.
``alpha``, ``beta``: null is the client's lr (PFLlib's alpha = beta = lr).

A held-out client (``eval.holdout_clients``) is evaluated the same way: one step from the
global model (``eval.finetune_epochs`` 0: no step). After training
(``eval.when: after_training``) a client keeps its meta-trained theta, after that step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.perfedavg import PerFedAvgParams
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
from fedsim.streams import PERFEDAVG_EVAL_KEY


@register
class PerFedAvg(OwnLoop):
    """FedAvg of meta-trained models; each client adapts with one step to be evaluated."""

    name = "perfedavg"
    Params = PerFedAvgParams
    keeps_personal = False
    newcomer = NewcomerRule(
        rule="one step theta - alpha grad f(theta; B) from the global model theta, B one "
        "seeded minibatch of its own train split: the step every client is evaluated with "
        "(one step for any eval.finetune_epochs >= 1)",
        source="the paper's: Fallah et al. 2020, abstract (an initial model that current or "
        "new users adapt by one or a few gradient steps on their own data)",
        adapts=True,
    )

    def step_sizes(self, probe: ClientProbe, p: PerFedAvgParams) -> tuple[float, float]:
        """(alpha, beta): the inner and outer step sizes of the round's params ``p`` (null:
        the client's lr)."""
        lr = probe.lr
        return (lr if p.alpha is None else p.alpha), (lr if p.beta is None else p.beta)

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """Train the received model (in client_finish); evaluate it after one adaptation step."""
        theta = broadcast["params"]
        plan = ClientPlan(train_params=theta, epochs=0)
        if client.evaluates and client.probe is not None:
            plan.eval_params = self.adapted(theta, client.probe, self.round_params(client))
        return plan

    def adapted(
        self, theta: torch.Tensor, probe: ClientProbe, params: PerFedAvgParams
    ) -> torch.Tensor | None:
        """The model a client is evaluated with: theta - alpha grad f(theta; B), B the first
        minibatch of its train split seeded by (seed, round, client, PERFEDAVG_EVAL_KEY)
        (None: that loss is not finite; the client is evaluated with theta)."""
        alpha, _ = self.step_sizes(probe, params)
        batch = probe.batches(1, key=PERFEDAVG_EVAL_KEY)[0]
        grad, loss = probe.gradient(theta, batch)
        return theta - alpha * grad if math.isfinite(loss) else None

    def kept_params(
        self, plan: ClientPlan, trained: torch.Tensor, update: ClientUpdate, client: ClientInfo
    ) -> torch.Tensor:
        """The meta-trained theta it uploads, after the step its evaluation takes (the main
        pass does not run, so ``trained`` is the received model)."""
        theta = update.sums["shared"][1]
        adapted = self.adapted(theta, self.needs_probe(client), self.round_params(client))
        return theta if adapted is None else adapted

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The step a client is evaluated with, from the global model (``adapted``), for any
        ``finetune_epochs`` >= 1; 0: the global model as it is."""
        theta = self.global_params(broadcast)
        if finetune_epochs == 0:
            return theta
        adapted = self.adapted(theta, self.needs_probe(client), self.round_params(client))
        return theta if adapted is None else adapted

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        probe = self.needs_probe(client)
        params = self.round_params(client)  # the round's alpha, beta and hf_delta
        alpha, beta = self.step_sizes(probe, params)
        size = self.federation.batch_size
        theta = plan.train_params.clone()
        losses = []
        for batches in self.epoch_batches(probe, plan, client):
            order = np.concatenate(batches) if batches else np.empty(0, np.int64)
            for start in range(0, len(order), 2 * size):
                chunk = order[start : start + 2 * size]
                half = -(-len(chunk) // 2)
                first, second = chunk[:half], chunk[half:]
                if len(second) == 0:
                    continue  # one sample left: no meta-step
                grad1, _ = probe.gradient(theta, first)
                grad2, loss = probe.gradient(theta - alpha * grad1, second)
                losses.append(loss)
                if self.params.order == "hessian_free":
                    grad2 = grad2 - alpha * self.hessian_product(
                        probe, theta, grad2, first, params.hf_delta
                    )
                theta.sub_(grad2, alpha=beta)
        mean_loss = sum(losses) / max(len(losses), 1)
        if not math.isfinite(mean_loss):
            return ClientUpdate(train_loss=mean_loss)
        return ClientUpdate(sums=self.shared_sums(theta, plan, client), train_loss=mean_loss)

    def hessian_product(
        self,
        probe: ClientProbe,
        theta: torch.Tensor,
        vector: torch.Tensor,
        batch: np.ndarray,
        hf_delta: float,
    ) -> torch.Tensor:
        """H(theta; batch) vector, by (grad(theta + r v) - grad(theta - r v)) / 2r with
        r = hf_delta / ||v|| (a step of length hf_delta)."""
        norm = float(vector.norm())
        if norm == 0.0 or not math.isfinite(norm):
            return torch.zeros_like(vector)
        r = hf_delta / norm
        plus, _ = probe.gradient(theta + r * vector, batch)
        minus, _ = probe.gradient(theta - r * vector, batch)
        return (plus - minus) / (2 * r)
