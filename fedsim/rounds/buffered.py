"""Buffered rounds: asynchronous FL in virtual time, FedBuff / FedAsync (``asynchronous.*``).

Who trains from which model version and when each update arrives is fixed by
``AsyncSchedule`` (clock/schedule.py) from the seed alone; the real work is still batched through
the executor's ``run_round``, so results do not depend on the executor or its worker count.

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
it by d(s_i) (``Rebase``, in each task's ``UploadJob``), so every algorithm averages what it
always averages.
The server stages run per aggregation: a robust rule over the buffer, central noise once per
server update. A checkpoint holds the schedule (clients in flight, the buffer, the clock)
and the model versions still trained from, so a resumed run continues to the bit.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsim.algorithms.base import Algorithm, ServerState
from fedsim.deployment.driver import Deployment, Rebase
from fedsim.rounds.clock.schedule import Aggregation, AsyncSchedule
from fedsim.rounds.clock.staleness import staleness_weights
from fedsim.rounds.clock.virtual import VirtualClock
from fedsim.rounds.dispatch import dispatch
from fedsim.rounds.kind import RoundKind, RoundPlan, RoundWork, sorted_results, store_states
from fedsim.runtime.worker import ClientResult, WorkerResult
from fedsim.storage import ClientStateStore


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
    availability: Any = None  # who is online when (None: everyone, always)

    def schedule(self) -> AsyncSchedule:
        return AsyncSchedule(
            self.clock, self.durations, self.concurrency, self.buffer_size, self.seed,
            self.availability,
        )  # fmt: skip

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


@dataclass
class BufferStep:
    """An aggregation's work before it is committed: the schedule after it, its buffer."""

    schedule: AsyncSchedule
    aggregation: Aggregation
    scales: np.ndarray
    trained: list[ClientResult]


class BufferedRounds(RoundKind):
    """Every round aggregates the next K arrivals of an asynchronous schedule."""

    def __init__(self, algorithm: Algorithm, deployment: Deployment, plan: AsyncPlan):
        self.algorithm, self.deployment, self.plan = algorithm, deployment, plan

    def start(self, executor: Any, state: ServerState, saved: Any = None) -> None:
        super().start(executor, state, saved)
        self.schedule = self.plan.schedule()
        self.versions: dict[int, ServerState] = {0: state}
        if saved is not None:
            self.schedule.load_state_dict(saved["schedule"])
            self.versions = dict(saved["versions"])

    def state_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule.state_dict(), "versions": dict(self.versions)}

    def work(self, plan: RoundPlan, state: ServerState, store: ClientStateStore) -> RoundWork:
        worker_results: list[WorkerResult] = []
        if plan.evaluated:
            worker_results = dispatch(
                self.executor, self.algorithm, plan.round, state, store,
                evaluate=plan.evaluated, context=plan.context(),
            ).worker_results  # fmt: skip
        evaluations = sorted_results(worker_results)
        work = RoundWork(
            results=evaluations,
            worker_results=worker_results,
            cohort_label="buffered clients",
            timing={"sim_time": self.schedule.time},
        )
        if not plan.training:
            return work
        schedule = copy.deepcopy(self.schedule)  # advanced for real when committed
        aggregation = schedule.next_aggregation()
        scales, stale = self.plan.discounts(aggregation)
        train_results, trained, work.bytes_down = self._train_buffer(
            aggregation, scales, state, store, plan
        )
        work.worker_results += train_results
        work.results = sorted([*evaluations, *trained], key=lambda c: c.client)
        work.cohort = {c.client for c in trained}
        work.cohort_label = f"{len(trained)} buffered clients"
        work.extras = _async_summary(self.plan, aggregation, scales, stale)
        work.pending = BufferStep(schedule, aggregation, scales, trained)
        return work

    def commit(
        self, plan: RoundPlan, work: RoundWork, state: ServerState, store: ClientStateStore
    ) -> ServerState:
        step: BufferStep | None = work.pending
        if step is None:
            return state
        store_states(step.trained, store)
        updates = zip(step.aggregation.updates, step.scales, strict=True)
        dropped = {u.client for u, scale in updates if scale == 0}
        kept = [c for c in step.trained if not c.failed and c.client not in dropped]
        combined = self.deployment.combine(
            plan.round, [w.sums for w in work.worker_results], kept
        )  # every update came on its own (``Rebase``): the partial sums are empty
        work.extras = {**combined.metrics, **work.extras}
        individual = {c.client: c.individual for c in kept if c.individual is not None}
        state = self.algorithm.aggregate(
            state, combined.sums, individual, plan.context() or self.algorithm.context(plan.round)
        )
        self.schedule = step.schedule
        keep = self.schedule.pending_versions() | {plan.round + 1}
        self.versions = {
            v: s for v, s in {**self.versions, plan.round + 1: state}.items() if v in keep
        }
        return state

    def _train_buffer(
        self,
        aggregation: Aggregation,
        scales: np.ndarray,
        current: ServerState,
        store: ClientStateStore,
        plan: RoundPlan,
    ) -> tuple[list[WorkerResult], list[ClientResult], int]:
        """Train the buffer's clients, one ``run_round`` per model version they started from."""
        scale_of = {u.client: float(s) for u, s in zip(aggregation.updates, scales, strict=True)}
        rebase = Rebase(current["params"], scale_of)
        worker_results: list[WorkerResult] = []
        download = 0
        for version in sorted({u.version for u in aggregation.updates}):
            done = dispatch(
                self.executor, self.algorithm, version, self.versions[version], store,
                train=[u.client for u in aggregation.updates if u.version == version],
                prepare=lambda tasks, v=version: self.deployment.prepare(v, tasks, rebase),
                context=plan.context(version),
            )  # fmt: skip
            worker_results += done.worker_results
            download += done.bytes_down
        trained = sorted_results(worker_results)
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
