"""SP-CACW: convergence-aware client weighting for selfish personalization (seed 002).

A target client trains its own model w by weighted SGD, w_t = w_{t-1} - eta sum_i alpha_i
g_t^(i): every participating peer i (the target too) returns a stochastic gradient of ITS
loss at the TARGET's parameters w_{t-1} (``client.batch_size`` samples). One round is one
pass of the target over its own train data (``steps_per_round=epoch``), each step one
gradient exchange through ``train_round`` (``ExchangeRound.exchange``): one stacked
``GradientTask`` per peer computing its gradients at every target's model (targets side by
side), so a worker returns all its clients' gradients of a step together.

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
- alpha on the simplex: ``ftal`` (default) follows the approximate leader, the minimiser of
  F (the losses built from the estimates b^ stand in for the unobservable bias);
  ``pgd`` takes one projected gradient step on F per update. ``update_every=epoch``
  (after each round's pass, default) or ``step``. alpha starts one-hot on the target
  (Local) unless ``init=uniform``;
- L: the top Hessian eigenvalue of the target's loss (HVP power iteration on its own train
  data, a ``CurvatureTask``) every ``lipschitz_every`` rounds, or a fixed ``L``;
- partial participation p: peer i joins a step with probability p (z ~ Bernoulli(p)) and its
  gradient counts as g / p; an absent peer counts as a zero gradient that step. The target
  always has its own gradient.

Evaluation: only the targets are evaluated (``evaluates``), each with its own model on its
own test split, so the round's ``acc_mean`` is the mean target accuracy the seed reports.
A client that is not a target has no SP-CACW model: on the driver its personalized model
is the initial one. ``join_ratio`` does not apply (peers join by ``participation``).

Logged per round: ``alpha`` (targets x clients), ``alpha/<target>/<peer>`` series for the
first few targets, ``alpha_zero`` (mean number of peers with alpha exactly 0 per target),
``lipschitz``, ``bias_term`` and ``variance_term`` (alpha^T A alpha and alpha^T L V alpha per
accumulated step, mean over targets); clients.csv's ``weight``: the mean alpha a client
gets over the targets. Figure ``spcacw_alpha.png``: alpha over rounds per target, peers
coloured by true cluster where the partition has clusters.
"""

from __future__ import annotations

import math
import time
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
    RoundReport,
    ServerState,
)
from fedsim.algorithms.registry import register
from fedsim.algorithms.simplex import projected_gradient_step, solve_leader
from fedsim.errors import ConfigError
from fedsim.figures import Figure, Panel
from fedsim.gradient_tasks import CurvatureTask, GradientTask

ALPHA_SERIES_TARGETS = 4  # targets whose alpha per peer become numeric series (W&B)
FIGURE_TARGETS = 4  # targets drawn in spcacw_alpha.png
ALPHA_PNG = "spcacw_alpha.png"


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


def ema_update(estimate: torch.Tensor, observed: torch.Tensor, rate: float) -> torch.Tensor:
    """(1 - rate) estimate + rate observed (in place on ``estimate``)."""
    return estimate.mul_(1.0 - rate).add_(observed, alpha=rate)


def beta_at(beta: Any, step: int) -> float:
    """beta_t: 1/t for ``1/t`` (t >= 1), else the constant."""
    return 1.0 / step if beta == "1/t" else float(beta)


def centred_update(
    mean: torch.Tensor, grads: torch.Tensor, rate: float, *, first: bool
) -> tuple[torch.Tensor, float]:
    """One step of the centred variance term: (r, 1 - rate) with r = g - m_{t-1}, the
    innovation of each peer's gradient against its running mean before this step; then
    m_t = m_{t-1} + rate r (in place on ``mean``). The step's term is (1 - rate) r r^T
    (Welford: with rate 1/t these add up to sum_t (g_t - gbar)(g_t - gbar)^T exactly).
    The first step sets m_1 = g_1 and adds nothing, whatever the rate."""
    if first:
        mean.copy_(grads)
        return grads, 0.0
    residual = grads - mean
    mean.add_(residual, alpha=rate)
    return residual, 1.0 - rate


def draw_participation(rng_key: list[int], p: float) -> bool:
    """z ~ Bernoulli(p), seeded by ``rng_key``."""
    return p >= 1.0 or bool(np.random.default_rng(rng_key).random() < p)


@register
class SPCACW(Algorithm):
    """Selfish targets train by alpha-weighted SGD on their peers' gradients at their model."""

    name = "spcacw"
    Params = SPCACWParams
    trains_by_exchange = True

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
        return {
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
        } | ({"grad_mean": torch.zeros(targets, m, p)} if self.centred else {})

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
        self.refresh_lipschitz(state, context)
        moments = [_Moments() for _ in self.targets]
        losses: list[float] = []
        pairs, solver_seconds = 0, 0.0
        for step in range(max(len(b) for b in batches)):
            active = [k for k in range(len(self.targets)) if step < len(batches[k])]
            tasks, counted = self.step_tasks(context, step, active, batches)
            pairs += counted
            outputs = context.exchange(tasks, {"models": state["models"]})
            grads = self.gather(outputs, active, state["models"].shape[1])
            for k in active:
                losses.append(self.own_loss(outputs, k))
                self.apply_step(state, k, grads[k], eta, moments[k])
                if params.update_every == "step":
                    solver_seconds += self.solve(state, k, moments[k])
        if params.update_every == "epoch":
            for k in range(len(self.targets)):
                solver_seconds += self.solve(state, k, moments[k])
        state["alpha_history"] = np.concatenate([state["alpha_history"], state["alpha"][None]])
        self.solver_seconds = solver_seconds  # wall-clock: not in the (reproducible) record
        report = self.report(state, losses, pairs, m)
        return state, report

    def target_batches(self, context: ExchangeRound, client: int) -> list[np.ndarray]:
        """The target's minibatches this round: shuffled passes over its train split."""
        own = np.asarray(self.federation.client_train_indices[client], dtype=np.int64)
        if not len(own):
            return []  # a target without training data takes no step
        size = context.batch_size
        per_pass = max(1, math.ceil(len(own) / size))
        steps = per_pass if self.params.steps_per_round == "epoch" else self.params.steps_per_round
        out: list[np.ndarray] = []
        passes = 0
        while len(out) < steps:
            rng = np.random.default_rng([context.seed, context.round, client, 11, passes])
            order = own[rng.permutation(len(own))]
            out += [order[i : i + size] for i in range(0, len(own), size)]
            passes += 1
        return out[:steps]

    def peer_batch(self, context: ExchangeRound, step: int, target: int, peer: int) -> np.ndarray:
        """A peer's minibatch for (round, step, target): ``batch_size`` of its train samples."""
        own = np.asarray(self.federation.client_train_indices[peer], dtype=np.int64)
        rng = np.random.default_rng([context.seed, context.round, step, target, peer, 13])
        return np.sort(rng.choice(own, size=min(context.batch_size, len(own)), replace=False))

    def step_tasks(
        self,
        context: ExchangeRound,
        step: int,
        active: list[int],
        batches: list[list[np.ndarray]],
    ) -> tuple[list[GradientTask], int]:
        """One stacked task per client owing gradients this step; and the (target, peer)
        pairs that crossed the network (the target's own gradient does not)."""
        at: dict[int, list[tuple[int, np.ndarray]]] = {}
        rows: dict[int, list[int]] = {}
        pairs = 0
        p = self.params.participation
        for k in active:
            target = self.targets[k]
            for peer in range(self.federation.num_clients):
                if peer == target:
                    samples = batches[k][step]
                elif draw_participation([context.seed, context.round, step, target, peer, 12], p):
                    samples = self.peer_batch(context, step, target, peer)
                    pairs += 1
                else:
                    continue
                at.setdefault(peer, []).append((k, samples))
                rows.setdefault(peer, []).append(k)
        tasks = [
            GradientTask(client=peer, stack="models", at=at[peer], tag=rows[peer])
            for peer in sorted(at)
        ]
        return tasks, pairs

    def gather(self, outputs: list[Any], active: list[int], size: int) -> dict[int, torch.Tensor]:
        """Per active target, the M x P stack of this step's gradients g~ (absent: 0, peers'
        scaled by 1 / p)."""
        m, p = self.federation.num_clients, self.params.participation
        grads = {k: torch.zeros(m, size) for k in active}
        for output in outputs:
            for j, k in enumerate(output.tag):
                scale = 1.0 if output.client == self.targets[k] else 1.0 / p
                grads[k][output.client] = output.gradient[j] * scale
        return grads

    def own_loss(self, outputs: list[Any], k: int) -> float:
        """The target's loss on its own minibatch this step."""
        for output in outputs:
            if output.client == self.targets[k]:
                return float(output.losses[output.tag.index(k)])
        return float("nan")

    def apply_step(
        self, state: ServerState, k: int, grads: torch.Tensor, eta: float, moments: _Moments
    ) -> None:
        """w -= eta alpha . g; then the bias EMA and the running Gram matrices."""
        target = self.targets[k]
        alpha = torch.as_tensor(state["alpha"][k], dtype=torch.float32)
        state["models"][k] -= eta * (alpha @ grads)
        state["steps"][k] += 1
        t = int(state["steps"][k])
        observed = grads - grads[target]  # b~ (zero for the target itself)
        rate = beta_at(self.params.beta, t)
        bias = ema_update(state["bias"][k], observed, rate)
        if self.centred:
            spread, weight = centred_update(state["grad_mean"][k], grads, rate, first=t == 1)
        else:
            spread, weight = grads, 1.0
        if t >= self.params.T_start:
            b64 = bias.double()
            state["bias_gram"][k] += (b64 @ b64.T).numpy()
            if weight:
                v64 = spread.double()
                state["grad_gram"][k] += eta * weight * (v64 @ v64.T).numpy()
            state["terms"][k] += 1
        moments.add(grads[target])

    def solve(self, state: ServerState, k: int, moments: _Moments) -> float:
        """Re-solve target k's alpha; returns the solver's seconds."""
        began = time.perf_counter()
        q, linear = self.quadratic_and_linear(state, k)
        everything = q if linear is None else np.concatenate([q.ravel(), linear])
        if state["terms"][k] == 0 or not np.isfinite(everything).all() or not np.any(everything):
            return time.perf_counter() - began
        reg = self.params.gamma * moments.variance_norm2() if self.params.reg else 0.0
        alpha = state["alpha"][k]
        if self.params.solver == "ftal":
            state["alpha"][k] = solve_leader(q, reg, alpha, linear=linear)
        else:
            state["alpha"][k] = projected_gradient_step(q, reg, alpha, linear=linear)
        return time.perf_counter() - began

    def quadratic_and_linear(self, state: ServerState, k: int) -> tuple[np.ndarray, Any]:
        """(Q, c) of target k's objective c^T alpha + alpha^T Q alpha: Q = A + L V and c =
        None (``bias_term=quadratic``), or Q = L V and c = diag(A), the running sums of
        ||b^_t^(i)||^2 (``linear``: the Jensen bound of the bias term on the simplex)."""
        variance = state["lipschitz"][k] * state["grad_gram"][k]
        if self.params.bias_term == "linear":
            return variance, np.diag(state["bias_gram"][k]).copy()
        return state["bias_gram"][k] + variance, None

    def refresh_lipschitz(self, state: ServerState, context: ExchangeRound) -> None:
        """L per target: the fixed ``L``, else an HVP estimate every ``lipschitz_every`` rounds."""
        params = self.params
        if params.L is not None:
            state["lipschitz"][:] = params.L
            return
        if context.round % params.lipschitz_every != 0 and np.isfinite(state["lipschitz"]).all():
            return
        tasks = [
            CurvatureTask(
                client=client,
                params=state["models"][k],
                iterations=params.lipschitz_iterations,
                num_samples=params.lipschitz_samples or None,
                indices=np.asarray(self.federation.client_train_indices[client]),
                tag=k,
            )
            for k, client in enumerate(self.targets)
        ]
        for output in context.exchange(tasks, {}):
            state["lipschitz"][output.tag] = abs(float(output.eigenvalue))

    def report(self, state: ServerState, losses: list[float], pairs: int, m: int) -> RoundReport:
        """The round's summary keys and the clients.csv weights."""
        alpha = state["alpha"]
        bias_terms, variance_terms = [], []
        for k in range(len(self.targets)):
            n = max(int(state["terms"][k]), 1)
            a = alpha[k]
            if self.params.bias_term == "linear":
                bias_terms.append(float(np.diag(state["bias_gram"][k]) @ a) / n)
            else:
                bias_terms.append(float(a @ state["bias_gram"][k] @ a) / n)
            variance_terms.append(
                float(state["lipschitz"][k] * (a @ state["grad_gram"][k] @ a)) / n
            )
        model_bytes = int(state["models"].shape[1]) * state["models"].element_size()
        summary: dict[str, Any] = {
            "train_loss": float(np.mean(losses)) if losses else float("nan"),
            "num_trained": len(self.targets),
            "bytes_down": pairs * model_bytes,  # the target's model to each joining peer
            "bytes_up": pairs * model_bytes,  # each joining peer's gradient back
            "alpha_zero": float(np.mean((alpha == 0).sum(axis=1))),
            "lipschitz": float(np.mean(state["lipschitz"])),
            "bias_term": float(np.mean(bias_terms)),
            "variance_term": float(np.mean(variance_terms)),
            "alpha": alpha.tolist(),
        }
        for k, target in enumerate(self.targets[:ALPHA_SERIES_TARGETS]):
            for peer in range(m):
                summary[f"alpha/{target}/{peer}"] = float(alpha[k, peer])
        weights = {c: float(alpha[:, c].mean()) for c in range(m)}
        return RoundReport(summary=summary, client_weights=weights)

    def figures(
        self, state: ServerState, client_states: ClientStates, round_idx: int
    ) -> list[Figure]:
        """alpha over rounds per target (``spcacw_alpha.png``), peers coloured by cluster."""
        history = state["alpha_history"]
        if not len(history):
            history = state["alpha"][None]
        clusters = self.federation.client_clusters
        m = self.federation.num_clients
        labels = tuple(
            f"client {i}" + ("" if clusters is None else f" (cluster {clusters[i]})")
            for i in range(m)
        )
        groups = () if clusters is None else tuple(int(c) for c in clusters)
        panels = [
            Panel(
                history[:, k, :].T,
                title=f"target {target}",
                xlabel="round",
                ylabel="alpha",
                kind="lines",
                x=np.arange(1, len(history) + 1),
                labels=labels if m <= 20 else (),
                groups=groups,
            )
            for k, target in enumerate(self.targets[:FIGURE_TARGETS])
        ]
        title = "SP-CACW: collaboration weights alpha per peer" + (
            "; colour = true cluster" if clusters is not None else ""
        )
        return [Figure(ALPHA_PNG, title, tuple(panels))]


class _Moments:
    """Running per-coordinate mean and variance of the target's own gradients this round."""

    def __init__(self) -> None:
        self.count, self.total, self.squares = 0, None, None

    def add(self, grad: torch.Tensor) -> None:
        g = grad.double()
        self.total = g.clone() if self.total is None else self.total.add_(g)
        self.squares = g * g if self.squares is None else self.squares.add_(g * g)
        self.count += 1

    def variance_norm2(self) -> float:
        """||var(g^(0))||^2 (0 until two gradients are in)."""
        if self.count < 2:
            return 0.0
        mean = self.total / self.count
        variance = (self.squares / self.count - mean * mean).clamp_min(0.0)
        return float((variance * variance).sum())
