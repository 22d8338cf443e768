"""The run's round kind, chosen once, and the feature pairs that cannot compose.

``round_kind_name`` is the one place that reads ``Algorithm.trains_by_exchange``:

- ``exchange``: the algorithm trains by gradient exchanges (SP-CACW);
- ``buffered``: ``asynchronous.enabled`` (FedBuff / FedAsync in virtual time);
- ``local``: everything else (synchronous rounds of local training).

``check_round_kind`` refuses, in one ConfigError naming both keys, a pair that cannot work
(docs/architecture.md keeps the whole table); every other pair composes. The deployment
options' own checks against the algorithm are ``fedsim/deployment/checks.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedsim.algorithms.base import Algorithm
from fedsim.config import ExperimentConfig
from fedsim.deployment.decision import checked_uploads
from fedsim.deployment.driver import Deployment
from fedsim.errors import ConfigError
from fedsim.rounds.buffered import AsyncPlan, BufferedRounds
from fedsim.rounds.clock.build import (
    availability,
    check_system,
    compute_clock,
    sync_clock,
    transfer_times,
)
from fedsim.rounds.clock.staleness import default_max_staleness
from fedsim.rounds.exchange import ExchangeRounds
from fedsim.rounds.kind import RoundKind
from fedsim.rounds.local import LocalRounds
from fedsim.run_plan import RunPlan

KINDS = ("local", "exchange", "buffered")


def round_kind_name(cfg: ExperimentConfig, algorithm: Algorithm) -> str:
    """``exchange`` | ``buffered`` | ``local`` (see the module docstring)."""
    if algorithm.trains_by_exchange:
        return "exchange"
    return "buffered" if cfg.asynchronous.enabled else "local"


def check_round_kind(
    cfg: ExperimentConfig, algorithm: Algorithm, kind: str, num_clients: int
) -> None:
    """ConfigError for a key this kind of round cannot honour (one line, both keys named)."""
    a, name = cfg.asynchronous, cfg.algorithm.name
    if algorithm.trains_in_own_loop:
        check_own_loop(cfg)
    check_local_work(cfg, algorithm, kind)
    if kind == "exchange":
        if a.enabled:
            raise ConfigError(
                "asynchronous.enabled",
                True,
                f"algorithm.name={name} trains by gradient exchanges, not uploads a late client "
                "could add to a newer model",
            )
        if cfg.attack.kind != "none":
            raise ConfigError(
                "attack.kind",
                cfg.attack.kind,
                f"algorithm.name={name} trains by gradient exchanges: a peer's gradients are not "
                "an upload it could corrupt",
            )
        if cfg.join_ratio != 1.0:
            raise ConfigError(
                "join_ratio",
                cfg.join_ratio,
                f"algorithm.name={name} trains by gradient exchanges, in which each peer joins "
                "a step by algorithm.participation; leave join_ratio at 1",
            )
    check_system(cfg, kind)
    if kind != "buffered":
        return
    uploads = list(checked_uploads(algorithm, num_clients, cfg.rounds))
    if any(upload is None for upload in uploads):
        raise ConfigError(
            "asynchronous.enabled",
            True,
            f"algorithm.name={name} uploads no model update a late client could add to a newer "
            "model; "
            "docs/deployment.md lists the algorithms that do",
        )
    if not all(upload.sums for upload in uploads if upload is not None):
        raise ConfigError(
            "asynchronous.enabled",
            True,
            f"algorithm.name={name} has no sum that is a plain mean of the model it sent, so a "
            "stale update cannot be moved onto the newest model",
        )
    if a.concurrency is not None and a.concurrency > num_clients:
        raise ConfigError(
            "asynchronous.concurrency", a.concurrency, f"at most the clients ({num_clients})"
        )
    if a.buffer_size is not None and a.buffer_size > num_clients:
        raise ConfigError(
            "asynchronous.buffer_size",
            a.buffer_size,
            f"at most the clients ({num_clients}): a bigger buffer never fills",
        )


def check_own_loop(cfg: ExperimentConfig) -> None:
    """ConfigError for a setting that acts on the worker's main pass, which an algorithm
    training in its own loop (``Algorithm.trains_in_own_loop``: plain SGD) never runs."""
    c, name = cfg.client, cfg.algorithm.name
    ignored = [
        ("client.optimizer", c.optimizer, c.optimizer not in (None, "sgd")),
        ("client.momentum", c.momentum, c.momentum != 0),
        ("client.nesterov", c.nesterov, bool(c.nesterov)),
        ("client.weight_decay", c.weight_decay, c.weight_decay != 0),
        ("client.clip_grad_norm", c.clip_grad_norm, c.clip_grad_norm is not None),
        ("client.steps", c.steps, c.steps is not None),
        ("client.grad_accumulation", c.grad_accumulation, c.grad_accumulation != 1),
        ("client.warmup_steps", c.warmup_steps, c.warmup_steps != 0),
        ("client.precision", c.precision, c.precision != "32"),
        ("attack.kind", cfg.attack.kind, cfg.attack.kind == "label_flip"),
    ]
    for key, value, on in ignored:
        if on:
            raise ConfigError(
                key, value, f"algorithm.name={name} trains clients in its own plain-SGD loop, "
                "which this setting does not reach; leave it at its default",
            )  # fmt: skip


def check_local_work(cfg: ExperimentConfig, algorithm: Algorithm, kind: str) -> None:
    """ConfigError for local steps or accumulation where a client's work is counted in epochs
    (FedNova's tau: ``Algorithm.counts_local_epochs``) or no main pass runs (exchanges)."""
    c, name = cfg.client, cfg.algorithm.name
    given = [("client.steps", c.steps, c.steps is not None),
             ("client.grad_accumulation", c.grad_accumulation, c.grad_accumulation != 1)]
    why = ("trains by gradient exchanges, not local passes" if kind == "exchange"
           else "counts a client's local steps from its epochs" if algorithm.counts_local_epochs
           else "")  # fmt: skip
    for key, value, on in given:
        if on and why:
            raise ConfigError(key, value, f"algorithm.name={name} {why}; leave it at its default")


def async_plan(
    cfg: ExperimentConfig,
    train_sizes: np.ndarray,
    plan: RunPlan,
    model_bytes: np.ndarray | None = None,
) -> AsyncPlan:
    """The run's asynchronous settings resolved (speeds drawn, transfers timed, the stale
    threshold; K and C from the run plan). ``model_bytes``: what each client downloads
    (and uploads back: a model-sized update) in a round."""
    a = cfg.asynchronous
    clock, durations = compute_clock(cfg, train_sizes, plan.client.local)
    if model_bytes is not None:
        durations = durations + transfer_times(cfg, model_bytes)
    assert plan.concurrency is not None
    return AsyncPlan(
        clock=clock,
        durations=durations,
        concurrency=plan.concurrency,
        buffer_size=plan.server_cohort,
        max_staleness=a.max_staleness or default_max_staleness(durations),
        stale_policy=a.stale,
        discount=a.staleness_discount,
        exponent=a.staleness_exponent,
        seed=cfg.seed,
        availability=availability(cfg, len(train_sizes)) if cfg.system.gates_clients else None,
    )


def build_round_kind(
    cfg: ExperimentConfig,
    algorithm: Algorithm,
    plan: RunPlan,
    deployment: Deployment,
    train_sizes: np.ndarray,
    model_bytes: Callable[[], np.ndarray] | None = None,
) -> RoundKind:
    """The round kind ``plan.kind`` for this run (checked by ``check_round_kind`` first);
    ``model_bytes``: each client's download in a round, for asynchronous transfer times."""
    if plan.kind == "exchange":
        return ExchangeRounds(algorithm, cfg.seed, plan.values.lr_at, cfg.client.batch_size)
    if plan.kind == "buffered":
        timed = model_bytes is not None and cfg.system.times_network
        sizes = model_bytes() if timed else None
        return BufferedRounds(algorithm, deployment, async_plan(cfg, train_sizes, plan, sizes))
    if not cfg.system.timed:
        return LocalRounds(algorithm, deployment)
    clock = sync_clock(cfg, plan, train_sizes)  # a synchronous run on the virtual clock
    return LocalRounds(algorithm, deployment, clock, cfg.system.gates_clients)
