"""SP-CACW's gradient exchange: each step's minibatches and tasks, and the gradients back.

A target's step asks every joining peer (the target too) for a gradient of its loss at the
target's model: ``target_batches`` are the target's own shuffled passes, ``peer_batch`` a
peer's minibatch, ``draw_participation`` whether a peer joins (z ~ Bernoulli(p)),
``step_tasks`` the stacked ``GradientTask`` per target, and ``gather`` its M x P gradient
stack (absent peers 0, peers' scaled by 1 / p). Every draw is keyed by (seed, round, step,
target, peer), so a target's task does not depend on the other targets.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedsim.algorithm_params.spcacw import SPCACWParams
from fedsim.algorithms.base import ExchangeRound, FederationInfo
from fedsim.gradient_tasks import GradientTask, TaskOutput
from fedsim.streams import (
    SPCACW_PARTICIPATION_TAG,
    SPCACW_PEER_BATCH_TAG,
    SPCACW_TARGET_BATCHES_TAG,
)


def draw_participation(rng_key: list[int], p: float) -> bool:
    """z ~ Bernoulli(p), seeded by ``rng_key``."""
    return p >= 1.0 or bool(np.random.default_rng(rng_key).random() < p)


def target_batches(
    federation: FederationInfo, params: SPCACWParams, context: ExchangeRound, client: int
) -> list[np.ndarray]:
    """The target's minibatches this round: shuffled passes over its train split."""
    own = np.asarray(federation.client_train_indices[client], dtype=np.int64)
    if not len(own):
        return []  # a target without training data takes no step
    size = context.batch_size
    per_pass = max(1, math.ceil(len(own) / size))
    steps = per_pass if params.steps_per_round == "epoch" else params.steps_per_round
    out: list[np.ndarray] = []
    passes = 0
    while len(out) < steps:
        rng = np.random.default_rng(
            [context.seed, context.round, client, SPCACW_TARGET_BATCHES_TAG, passes]
        )
        order = own[rng.permutation(len(own))]
        out += [order[i : i + size] for i in range(0, len(own), size)]
        passes += 1
    return out[:steps]


def peer_batch(
    federation: FederationInfo, context: ExchangeRound, step: int, target: int, peer: int
) -> np.ndarray:
    """A peer's minibatch for (round, step, target): ``batch_size`` of its train samples."""
    own = np.asarray(federation.client_train_indices[peer], dtype=np.int64)
    rng = np.random.default_rng(
        [context.seed, context.round, step, target, peer, SPCACW_PEER_BATCH_TAG]
    )
    return np.sort(rng.choice(own, size=min(context.batch_size, len(own)), replace=False))


def step_tasks(
    federation: FederationInfo,
    params: SPCACWParams,
    targets: list[int],
    context: ExchangeRound,
    step: int,
    active: list[int],
    batches: list[list[np.ndarray]],
) -> tuple[list[GradientTask], int]:
    """One stacked task per active target: every joining peer's minibatch (the target's
    own included) at the target's model, tagged (k, peers); and the (target, peer) pairs
    that crossed the network (the target's own gradient does not)."""
    tasks, pairs = [], 0
    p = params.participation
    raw = params.variance_term != "centred"  # the raw variance term's G G^T comes along
    for k in active:
        target = targets[k]
        peers, at = [], []
        for peer in range(federation.num_clients):
            if peer == target:
                samples = batches[k][step]
            elif draw_participation(
                [context.seed, context.round, step, target, peer, SPCACW_PARTICIPATION_TAG], p
            ):
                samples = peer_batch(federation, context, step, target, peer)
                pairs += 1
            else:
                continue
            peers.append(peer)
            at.append((k, samples))
        tasks.append(GradientTask(target, stack="models", at=at, tag=(k, peers), gram=raw))
    return tasks, pairs


def gather(
    federation: FederationInfo, params: SPCACWParams, targets: list[int], output: TaskOutput
) -> tuple[torch.Tensor, np.ndarray | None]:
    """The target's M x P stack of this step's gradients g~ (absent peers: 0, peers'
    scaled by 1 / p) and its Gram matrix if the task returned one. With every peer in
    and p = 1 that is the task's own stack, read only."""
    k, peers = output.tag
    m, p = federation.num_clients, params.participation
    grads = output.gradient
    gram = None if output.gram is None else output.gram.numpy()
    if len(peers) == m and p >= 1.0:
        return grads, gram
    scale = np.array([1.0 if peer == targets[k] else 1.0 / p for peer in peers])
    full = torch.zeros(m, grads.shape[1])
    full.index_copy_(0, torch.tensor(peers), grads * torch.tensor(scale[:, None]).float())
    if gram is not None:
        expanded = np.zeros((m, m))
        expanded[np.ix_(peers, peers)] = gram * np.outer(scale, scale)
        gram = expanded
    return full, gram


def own_loss(targets: list[int], output: TaskOutput) -> float:
    """The target's loss on its own minibatch this step."""
    k, peers = output.tag
    return float(output.losses[peers.index(targets[k])])
