"""SP-CACW: convergence-aware client weighting for selfish personalization (seed 002).

A target client trains its own model w by weighted SGD, w_t = w_{t-1} - eta sum_i alpha_i
g_t^(i): every participating peer i (the target too) returns a stochastic gradient of ITS
loss at the TARGET's parameters w_{t-1} (``client.batch_size`` samples). One round is one
pass of the target over its own train data (``steps_per_round=epoch``), each step one
gradient exchange through ``train_round`` (``ExchangeRound.exchange``): one stacked
``GradientTask`` per target holding every joining peer's minibatch at the target's model
(targets side by side), which a worker computes as one ``vmap`` over the peers and returns
with the gradients' Gram matrix. A target's task does not depend on the other targets, so a
target computes the same bits alone or beside others, on any executor.

Per target (every quantity below is the target's own):
- bias estimates b~_t^(i) = g_t^(i) - g_t^(0), EMA b^_t = (1 - beta_t) b^_{t-1} + beta_t b~_t
  with beta_t = 1/t (``beta=1/t``, t the target's step count) or a constant;
- running Gram matrices A = sum_{t >= T_start} B^_t B^_t^T and V = sum_{t >= T_start} eta
  G_t G_t^T (M x M; B^_t, G_t the M x P stacks): the practical objective is
  F(alpha) = alpha^T (A + L V) alpha (+ ``reg``: lambda_reg sum alpha^3 with lambda_reg =
  ``gamma`` ||var(g^(0))||^2, the per-coordinate variance of the target's gradients over
  the round so far). Only b^ (M x P) and these M x M matrices are kept, never the history;
- two options change the objective's terms (defaults: the seed's formula). ``variance_term=
  centred``: V sums eta (1 - beta_t) R_t R_t^T over the innovations R_t = G_t - M_{t-1} of
  each peer's gradient against its running mean (M_1 = G_1, M_t = M_{t-1} + beta_t R_t, the
  bias EMA's rate: with beta 1/t and T_start 1, V = eta sum_t (G_t - Gbar)(G_t - Gbar)^T
  exactly), i.e. noise covariances instead of second moments; it keeps M (targets x M x P,
  as much again as b^). ``bias_term=linear``: sum_i alpha_i ||b^_t^(i)||^2 (the Jensen bound
  on the simplex) instead of ||sum_i alpha_i b^_t^(i)||^2, i.e. F = diag(A)^T alpha +
  alpha^T L V alpha. Both together give the objective the seed's closed-form weights
  alpha_i = [(lambda - C1 ||b_i||^2) / (2 C2 sigma_i^2)]_+ minimise;
- ``L_history``: ``current`` (default) multiplies the whole sum V by the latest L at solve
  time; ``per_step`` adds each step's L eta G_t G_t^T as the sum runs (L of that round);
- ``gamma``: a constant, or ``paper``: 1 / ((8 + 2 L eta) g_max^2), g_max the largest
  gradient norm (any peer's, at the target's model) seen so far;
- alpha on the simplex: ``ftal`` (default) follows the approximate leader, the minimiser of
  F (the losses built from the estimates b^ stand in for the unobservable bias);
  ``pgd`` takes one projected gradient step on F per update. ``update_every=epoch``
  (after each round's pass, default) or ``step``. alpha starts one-hot on the target
  (Local) unless ``init=uniform``;
- L: the top Hessian eigenvalue of the target's loss (HVP power iteration on its own train
  data, a ``CurvatureTask``; or a fixed ``L``) every ``lipschitz_every`` rounds from T_start;
- partial participation p: peer i joins a step with probability p (z ~ Bernoulli(p)) and its
  gradient counts as g / p; an absent peer counts as a zero gradient that step. The target
  always has its own gradient.

Evaluation: only the targets are evaluated (``evaluates``), each with its own model on its
own test split, so the round's ``acc_mean`` is the mean target accuracy the seed reports.
A client that is not a target has no SP-CACW model: on the driver its personalized model
is the initial one. ``join_ratio`` does not apply (peers join by ``participation``).
Held-out clients (``eval.holdout_clients``) are refused: a newcomer is no target.

Logged per round: ``alpha`` (targets x clients), ``alpha/<target>/<peer>`` series for the
first few targets, ``alpha_zero`` (mean number of peers with alpha exactly 0 per target),
``lipschitz``, ``bias_term`` and ``variance_term`` (alpha^T A alpha and alpha^T L V alpha per
accumulated step, mean over targets); clients.csv's ``weight``: the mean alpha a client
gets over the targets. Figure ``spcacw_alpha.png``: alpha over rounds per target, peers
coloured by true cluster where the partition has clusters. The per-target bookkeeping is in
``spcacw_estimates.py``, each step's minibatches, tasks and gathered gradients in
``spcacw_exchange.py``, the report and figure in ``spcacw_report.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.spcacw import SPCACWParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientStates,
    ExchangeRound,
    FederationInfo,
    NewcomerRule,
    RoundReport,
    ServerState,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.spcacw_estimates import (
    TargetMoments,
    apply_step,
    beta_at,
    centred_update,
    lipschitz_due,
    quadratic_and_linear,
    solve,
)
from fedsim.algorithms.spcacw_exchange import (
    draw_participation,
    gather,
    own_loss,
    peer_batch,
    step_tasks,
    target_batches,
)
from fedsim.algorithms.spcacw_report import alpha_figures, round_report
from fedsim.errors import ConfigError
from fedsim.figures import Figure
from fedsim.gradient_tasks import CurvatureTask, TaskOutput

__all__ = ["SPCACW", "SPCACWParams", "beta_at", "centred_update", "draw_participation"]
_Moments = TargetMoments  # the name the tests knew


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def target_list(value: Any, num_clients: int) -> list[int]:
    """The target ids of ``algorithm.targets``; a ConfigError when one is out of range."""
    targets = list(range(num_clients)) if value == "all" else value
    targets = [targets] if _is_int(targets) else list(targets)
    bad = [t for t in targets if t >= num_clients]
    if bad:
        raise ConfigError(
            "algorithm.targets",
            value,
            f"client ids must be in [0, {num_clients - 1}] (data.num_clients={num_clients})",
        )
    return targets


@register
class SPCACW(Algorithm):
    """Selfish targets train by alpha-weighted SGD on their peers' gradients at their model."""

    name = "spcacw"
    Params = SPCACWParams
    trains_by_exchange = True
    newcomer = NewcomerRule(
        rule="none: refused",
        source="fedsim's choice: the method serves only its targets",
        refused="SP-CACW trains a model only for its targets, by collaboration weights "
        "estimated from gradient exchanges during training; a newcomer is no target",
    )
    has_global_model = False  # one model per target, none for the federation

    def __init__(self, params: SPCACWParams, federation: FederationInfo):
        super().__init__(params, federation)
        self.targets = target_list(params.targets, federation.num_clients)
        self.row = {client: k for k, client in enumerate(self.targets)}
        self.centred = params.variance_term == "centred"
        if not federation.client_train_indices:
            raise ValueError("SP-CACW needs FederationInfo.client_train_indices")

    # --- driver side ---
    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        targets, m, p = len(self.targets), self.federation.num_clients, initial_params.numel()
        alpha = np.full((targets, m), 1.0 / m)
        if self.params.init == "onehot":
            alpha[:] = 0.0
            alpha[np.arange(targets), self.targets] = 1.0
        state = {
            "models": initial_params.unsqueeze(0).repeat(targets, 1),
            "initial": initial_params.clone(),
            "alpha": alpha,
            "bias": torch.zeros(targets, m, p),  # b^ per target and peer
            "bias_gram": np.zeros((targets, m, m)),  # A
            "grad_gram": np.zeros((targets, m, m)),  # V (eta included)
            "steps": np.zeros(targets, dtype=np.int64),  # t per target
            "terms": np.zeros(targets, dtype=np.int64),  # steps accumulated in A and V
            "lipschitz": np.full(targets, np.nan),
            "alpha_history": np.zeros((0, targets, m)),
        }
        if self.centred:
            state["grad_mean"] = torch.zeros(targets, m, p)
        if self.params.L_history == "per_step":
            state["variance_gram"] = np.zeros((targets, m, m))  # sum L_t eta G_t G_t^T
        if self.params.reg and self.params.gamma == "paper":
            state["g_max"] = np.zeros(targets)
        return state

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        return {"models": state["models"], "initial": state["initial"]}

    def evaluates(self, client: int) -> bool:
        return client in self.row

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        row = self.row.get(client.client)
        own = broadcast["initial"] if row is None else broadcast["models"][row]
        return ClientPlan(train_params=own)

    # --- the round ---
    def train_round(
        self, state: ServerState, context: ExchangeRound
    ) -> tuple[ServerState, RoundReport]:
        """One pass of every target over its train data; alpha re-solved as configured."""
        state = {
            k: v.clone() if isinstance(v, torch.Tensor) else np.copy(v) for k, v in state.items()
        }
        params, m = self.params, self.federation.num_clients
        eta = context.lr if params.lr is None else params.lr
        batches = [self.target_batches(context, client) for client in self.targets]
        self.refresh_lipschitz(state, context, [len(b) for b in batches])
        moments = [TargetMoments() for _ in self.targets]
        scratch = torch.empty(state["bias"].shape[1:])  # b~ of one target, every step
        losses: list[float] = []
        pairs, solver_seconds = 0, 0.0
        for step in range(max(len(b) for b in batches)):
            active = [k for k in range(len(self.targets)) if step < len(batches[k])]
            tasks, counted = step_tasks(
                self.federation, params, self.targets, context, step, active, batches
            )
            pairs += counted
            for output in context.exchange(tasks, {"models": state["models"]}):
                k = output.tag[0]
                grads, grads_gram = self.gather(output)
                losses.append(own_loss(self.targets, output))
                apply_step(
                    params, state, k, self.targets[k], grads, eta, moments[k],
                    grads_gram=grads_gram, scratch=scratch,
                )  # fmt: skip
                if params.update_every == "step":
                    solver_seconds += solve(params, state, k, moments[k], eta)
        if params.update_every == "epoch":
            for k in range(len(self.targets)):
                solver_seconds += solve(params, state, k, moments[k], eta)
        state["alpha_history"] = np.concatenate([state["alpha_history"], state["alpha"][None]])
        self.solver_seconds = solver_seconds  # wall-clock: not in the (reproducible) record
        return state, round_report(params, self.targets, state, losses, pairs, m)

    # --- the exchange (spcacw_exchange.py), kept callable as methods ---
    def target_batches(self, context: ExchangeRound, client: int) -> list[np.ndarray]:
        """The target's minibatches this round (``spcacw_exchange.target_batches``)."""
        return target_batches(self.federation, self.params, context, client)

    def peer_batch(self, context: ExchangeRound, step: int, target: int, peer: int) -> np.ndarray:
        """A peer's minibatch for (round, step, target) (``spcacw_exchange.peer_batch``)."""
        return peer_batch(self.federation, context, step, target, peer)

    def gather(self, output: TaskOutput) -> tuple[torch.Tensor, np.ndarray | None]:
        """The target's M x P gradient stack and Gram matrix (``spcacw_exchange.gather``)."""
        return gather(self.federation, self.params, self.targets, output)

    # --- per-target bookkeeping (spcacw_estimates.py), kept callable as methods ---
    def apply_step(
        self, state: ServerState, k: int, grads: torch.Tensor, eta: float, moments: TargetMoments
    ) -> None:
        """w -= eta alpha . g; then the bias EMA and the running Gram matrices."""
        apply_step(self.params, state, k, self.targets[k], grads, eta, moments)

    def quadratic_and_linear(self, state: ServerState, k: int) -> tuple[np.ndarray, Any]:
        """(Q, c) of target k's objective (``spcacw_estimates.quadratic_and_linear``)."""
        return quadratic_and_linear(self.params, state, k)

    def refresh_lipschitz(self, state: ServerState, context: ExchangeRound, steps: list) -> None:
        """L per target: the fixed ``L``, else HVP estimates (``lipschitz_due``)."""
        params = self.params
        if params.L is not None:
            state["lipschitz"][:] = params.L
            return
        tasks = [
            CurvatureTask(
                client=self.targets[k],
                params=state["models"][k],
                iterations=params.lipschitz_iterations,
                num_samples=params.lipschitz_samples or None,
                indices=np.asarray(self.federation.client_train_indices[self.targets[k]]),
                tag=k,
            )
            for k in lipschitz_due(params, state, context.round, steps)
        ]
        for output in context.exchange(tasks, {}) if tasks else ():
            state["lipschitz"][output.tag] = abs(float(output.eigenvalue))

    def figures(
        self, state: ServerState, client_states: ClientStates, round_idx: int
    ) -> list[Figure]:
        """alpha over rounds per target (``spcacw_alpha.png``), peers coloured by cluster."""
        return alpha_figures(self.targets, self.federation, state)
