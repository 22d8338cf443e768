"""Asynchronous rounds (``asynchronous.*``): FedBuff / FedAsync in virtual time.

The simulation hands a run with ``asynchronous.enabled`` to ``run_async``. Who trains from
which model version and when each update arrives is fixed by ``AsyncSchedule``
(async_schedule.py) from the seed alone; the real work is still batched through the
executor's ``run_round``, so results do not depend on the executor or its worker count.

One fedsim round is one server aggregation. Round r evaluates model version r (made at
virtual time ``sim_time``), then takes the next K arrivals (``asynchronous.buffer_size``)
and aggregates them into version r + 1. Each update of that buffer trained from version
v <= r; its staleness is s = r - v. The server applies (FedBuff, Nguyen et al. 2022; FedAsync,
Xie et al. 2019, with K = 1)

    x_{r+1} = x_r + eta * sum_i p_i d(s_i) delta_i

with delta_i the client's update to the model it trained from, p_i the algorithm's own
aggregation weights over the buffer (FedAvg: n_i / sum n), d the staleness discount
(``asynchronous.staleness_discount``, FedBuff's (1 + s)^-1/2 by default) and eta the
algorithm's server step (``algorithm.server_lr`` where it has one: FedBuff's eta_g,
FedAsync's alpha in this delta form; else 1). An update whose client was away longer than
``asynchronous.max_staleness`` (default 2 tau, tau the median client round time) is stale:
``discount`` uses it at its discounted weight, ``drop`` leaves it out of the sums.

The clients of one buffer are trained when the buffer is aggregated, one ``run_round`` per
model version they started from (their training depends only on that version and their own
state, so when it runs does not change it); the worker moves each update onto x_r and scales
it by d(s_i) (``ClientUpload.rebase``), so every algorithm averages what it always averages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.algorithms.base import Algorithm, WeightedSum
from fedsim.config import ExperimentConfig
from fedsim.deployment.async_schedule import (
    Aggregation,
    AsyncSchedule,
    SyncTimeline,
    client_work,
)
from fedsim.deployment.checks import _check_rule
from fedsim.deployment.client_stages import ClientUpload
from fedsim.deployment.staleness import VirtualClock, default_max_staleness, staleness_weights
from fedsim.errors import ConfigError
from fedsim.interrupts import Interruption, deferred_interrupt
from fedsim.round_records import divergence_error, failure_warning, round_record, round_summary
from fedsim.runtime.executor import Executor
from fedsim.runtime.worker import ClientResult, ClientTask, WorkerResult
from fedsim.storage import ClientStateStore
from fedsim.tracking.base import Sink

_SPEED_STREAM = 0x5BEED  # seeds the clients' speeds apart from other uses of the seed


def default_buffer_size(concurrency: int) -> int:
    """K when ``asynchronous.buffer_size`` is null: half the clients in flight (at least 1)."""
    return max(1, concurrency // 2)


def check_async(cfg: ExperimentConfig, algorithm: Algorithm, num_clients: int, cohort: int) -> None:
    """ConfigError unless the ``asynchronous`` keys make sense for this run and algorithm."""
    a, name = cfg.asynchronous, cfg.algorithm.name
    if not a.enabled:
        if a.dropout > 0:
            raise ConfigError(
                "asynchronous.dropout",
                a.dropout,
                "only with asynchronous.enabled=true (a synchronous round waits for everyone)",
            )
        return
    if algorithm.trains_by_exchange:
        raise ConfigError(
            "asynchronous.enabled", True, f"{name} trains by gradient exchanges, not uploads"
        )
    upload = algorithm.model_upload(algorithm.client_info(0, 0))
    if upload is None:
        raise ConfigError(
            "asynchronous.enabled",
            True,
            f"{name} uploads no model update a late client could add to a newer model; "
            "docs/deployment.md lists the algorithms that do",
        )
    if not upload.sums:
        raise ConfigError(
            "asynchronous.enabled",
            True,
            f"{name} has no sum that is a plain mean of the model it sent, so a stale update "
            "cannot be moved onto the newest model",
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
    if cfg.checkpoint_every > 0:
        raise ConfigError(
            "checkpoint_every",
            cfg.checkpoint_every,
            "asynchronous runs do not checkpoint yet (clients in flight are not saved): set 0",
        )
    if cfg.privacy.mode == "central":
        raise ConfigError(
            "privacy.mode",
            "central",
            "the central accountant assumes a sampled cohort per round, not asynchronous "
            "arrivals; use local",
        )
    buffer_size = a.buffer_size or default_buffer_size(a.concurrency or cohort)
    _check_rule(cfg.aggregation, buffer_size)


@dataclass
class AsyncPlan:
    """The run's asynchronous settings, resolved: speeds, K, C and the stale threshold."""

    clock: VirtualClock
    durations: np.ndarray  # one round of each client, in virtual time
    concurrency: int
    buffer_size: int
    max_staleness: float
    stale_policy: str
    discount: str
    exponent: float
    seed: int

    def schedule(self) -> AsyncSchedule:
        return AsyncSchedule(
            self.clock, self.durations, self.concurrency, self.buffer_size, self.seed
        )

    def discounts(self, aggregation: Aggregation) -> tuple[np.ndarray, np.ndarray]:
        """(d(s_i) per update, 0 for a dropped stale one; whether each update is stale)."""
        stale = aggregation.delays() > self.max_staleness
        scales = staleness_weights(
            aggregation.staleness(),
            kind=self.discount,
            a=self.exponent,
            policy=self.stale_policy,
            stale=stale,
        )
        return scales, stale


def timing(
    cfg: ExperimentConfig, algorithm: Algorithm, data: Any, cohort: int, sample_cohort: Any
) -> AsyncPlan | SyncTimeline | None:
    """The run's virtual clock (checked first): an ``AsyncPlan`` for an asynchronous run, a
    ``SyncTimeline`` for a synchronous one with ``asynchronous.speeds``, else None."""
    check_async(cfg, algorithm, data.num_clients, cohort)
    a = cfg.asynchronous
    if not a.enabled and a.speeds is None:
        return None
    n = data.num_clients
    clock = VirtualClock.from_spec(
        a.speeds or "constant", n, seed=(cfg.seed, _SPEED_STREAM), dropout=a.dropout
    )
    durations = clock.durations(range(n), client_work(data.train_sizes(), cfg.client.epochs))
    if not a.enabled:
        return SyncTimeline(durations, sample_cohort)
    concurrency = a.concurrency or cohort
    return AsyncPlan(
        clock=clock,
        durations=durations,
        concurrency=concurrency,
        buffer_size=a.buffer_size or default_buffer_size(concurrency),
        max_staleness=a.max_staleness or default_max_staleness(durations),
        stale_policy=a.stale,
        discount=a.staleness_discount,
        exponent=a.staleness_exponent,
        seed=cfg.seed,
    )


def _client_sums(result: ClientResult) -> dict[str, WeightedSum]:
    out: dict[str, WeightedSum] = {}
    for key, (weight, value) in (result.upload.sums or {}).items():
        out.setdefault(key, WeightedSum()).add(weight, value)
    return out


def _train_buffer(
    sim: Any,
    executor: Executor,
    aggregation: Aggregation,
    scales: np.ndarray,
    versions: dict[int, Any],
    current: Any,
    store: ClientStateStore,
) -> tuple[list[WorkerResult], list[ClientResult], int]:
    """Train the buffer's clients, one ``run_round`` per model version they started from."""
    algorithm = sim.algorithm
    scale_of = {u.client: float(s) for u, s in zip(aggregation.updates, scales, strict=True)}
    rebase = current["params"]
    worker_results: list[WorkerResult] = []
    download = 0
    for version in sorted({u.version for u in aggregation.updates}):
        source = versions[version]
        clients = sorted(u.client for u in aggregation.updates if u.version == version)
        tasks = [
            ClientTask(c, algorithm.client_payload(source, c), store.get(c), False, True)
            for c in clients
        ]
        sim.deployment.prepare(version, tasks)
        for task in tasks:
            if task.upload is None:
                task.upload = ClientUpload(sim.deployment.settings)
            task.upload.individual = True  # the buffer, not the worker, decides the sums
            task.upload.rebase, task.upload.delta_scale = rebase, scale_of[task.client]
        broadcast = algorithm.broadcast(source)
        download += sum(algorithm.download_nbytes(broadcast, t.payload, t.state) for t in tasks)
        worker_results += executor.run_round(version, broadcast, tasks)
    trained = sorted((c for w in worker_results for c in w.clients), key=lambda c: c.client)
    return worker_results, trained, download


def _async_summary(
    plan: AsyncPlan, aggregation: Aggregation, scales: np.ndarray, stale: np.ndarray
) -> dict[str, Any]:
    staleness = aggregation.staleness()
    return {
        "arrivals": len(aggregation.updates),
        "stale": int(stale.sum()),
        "stale_dropped": int((stale & (scales == 0)).sum()),
        "dropouts": len(aggregation.dropouts),
        "staleness_mean": float(staleness.mean()),
        "staleness_max": int(staleness.max()),
        "max_staleness": plan.max_staleness,
    }


def run_async(
    sim: Any,
    executor: Executor,
    sinks: list[Sink] | None = None,
    *,
    run_dir: Path | None = None,
    resume: Any = None,
) -> Any:
    """``Simulation.run`` for ``asynchronous.enabled``: rounds are server aggregations."""
    from fedsim.simulation import RunResult

    if resume is not None:  # refused by check_async (checkpoint_every must be 0)
        raise ConfigError("--resume", str(run_dir), "asynchronous runs do not checkpoint yet")
    cfg, sinks, algorithm, plan = sim.cfg, sinks or [], sim.algorithm, sim.timing
    state = algorithm.init_state(sim.initial_params)
    budget_gb = cfg.runtime.state_memory_gb
    store = ClientStateStore(None if budget_gb is None else int(budget_gb * 2**30))
    sim.deployment.load_state_dict(None)
    schedule = plan.schedule()
    versions = {0: state}
    history: list[dict[str, Any]] = []
    num_classes = (sim.data.class_counts("train") > 0).sum(axis=1)
    sim.interrupted = None
    done = 0
    try:
        for round_idx in range(cfg.rounds + 1):
            began = time.perf_counter()
            training = round_idx < cfg.rounds
            evaluating = round_idx % cfg.eval_every == 0 or round_idx == cfg.rounds
            sim_time = schedule.time
            evaluated = [
                c for c in range(sim.data.num_clients) if evaluating and algorithm.evaluates(c)
            ]
            worker_results: list[WorkerResult] = []
            if evaluated:
                tasks = [
                    ClientTask(c, algorithm.client_payload(state, c), store.get(c), True, False)
                    for c in evaluated
                ]
                worker_results += executor.run_round(round_idx, algorithm.broadcast(state), tasks)
            evaluations = [c for w in worker_results for c in w.clients]
            trained: list[ClientResult] = []
            extras: dict[str, Any] = {}
            download = 0
            if training:
                aggregation = schedule.next_aggregation()
                scales, stale = plan.discounts(aggregation)
                train_results, trained, download = _train_buffer(
                    sim, executor, aggregation, scales, versions, state, store
                )
                worker_results += train_results
                extras = _async_summary(plan, aggregation, scales, stale)
            with deferred_interrupt():  # commit the round whole, or not at all
                failed = [c.client for c in trained if c.failed]
                diverged = bool(trained) and len(failed) > cfg.max_failed_fraction * len(trained)
                if not diverged and training:
                    for c in trained:
                        if c.state is not None:
                            store.put(c.client, c.state)
                    updates = zip(aggregation.updates, scales, strict=True)
                    dropped = {u.client for u, scale in updates if scale == 0}
                    kept = [c for c in trained if not c.failed and c.client not in dropped]
                    sums = sim.deployment.combine(round_idx, [_client_sums(c) for c in kept], kept)
                    individual = {c.client: c.individual for c in kept if c.individual is not None}
                    state = algorithm.aggregate(state, sums, individual, round_idx)
                    versions[round_idx + 1] = state
                    keep = schedule.pending_versions() | {round_idx + 1}
                    versions = {v: s for v, s in versions.items() if v in keep}
                results = sorted([*evaluations, *trained], key=lambda c: c.client)
                summary = round_summary(results, worker_results, failed, began)
                summary["sim_time"] = sim_time
                if failed:
                    cohort = {c.client for c in trained}
                    summary["warnings"] = [failure_warning(failed, cohort, diverged)]
                if training:
                    summary["bytes_down"] = download
                    summary["bytes_up"] = sum(c.upload_bytes for c in trained)
                    summary.update(sim.deployment.round_summary())
                    summary.update(extras)
                record = round_record(round_idx, summary, results, num_classes)
                sim.deployment.annotate(record)
                history.append({"round": round_idx, **summary})
                for sink in sinks:
                    sink.log_round(record)
                if diverged:
                    sim._finish(sinks, history, "diverged", done)
                    raise divergence_error(
                        round_idx, failed, f"{len(trained)} buffered clients",
                        cfg.max_failed_fraction, done,
                    )  # fmt: skip
                done = round_idx + 1
    except KeyboardInterrupt:
        sim.interrupted = Interruption(done, None)
        sim._finish(sinks, history, "interrupted", done)
        raise
    summary = sim._finish(sinks, history, "completed", done)
    return RunResult(summary=summary, history=history, state=state, client_store=store)
