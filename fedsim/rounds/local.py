"""Local rounds: the sampled cohort trains locally, the server aggregates (synchronous FL).

One ``run_round`` per round: every evaluated or sampled client gets one task (evaluate,
then train); the deployment's client stages run in the worker after training, its server
stages on the driver before ``aggregate`` (``fedsim/deployment/``).

With a ``SyncClock`` (any ``system.*`` key set) the round has a virtual time (``sim_time``,
``round_time``), and when the clock may leave clients out (availability, dropout,
over-selection, a deadline) the clock picks who trains, every update comes on its own, and
only the kept clients' updates and states count (``clock/sync.py`` has the rules).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fedsim.algorithms.base import Algorithm, ServerState
from fedsim.deployment.driver import Deployment
from fedsim.rounds.clock.sync import Outcome, SyncClock
from fedsim.rounds.dispatch import Dispatched, dispatch, download_sizes
from fedsim.rounds.kind import RoundKind, RoundPlan, RoundWork, store_states
from fedsim.runtime.worker import ClientResult
from fedsim.storage import ClientStateStore


@dataclass
class ClockStep:
    """A timed round's work before it is committed: its last attempt and the clock's
    attempt count after the round (its time after it is the attempt's end)."""

    outcome: Outcome
    steps: int


class LocalRounds(RoundKind):
    """Sample, train locally, aggregate (FedAvg's round, and every algorithm's but two)."""

    def __init__(
        self,
        algorithm: Algorithm,
        deployment: Deployment,
        clock: SyncClock | None = None,
        gates: bool = False,
    ):
        """``clock``: the run's virtual clock (None: no ``system.*`` key set); ``gates``:
        whether it may keep fewer clients than it samples (``SystemConfig.gates_clients``)."""
        self.algorithm, self.deployment = algorithm, deployment
        self.clock, self.gates = clock, gates

    def start(self, executor: Any, state: ServerState, saved: Any = None) -> None:
        super().start(executor, state, saved)
        if self.clock is not None and saved is not None:
            self.clock.load_state_dict(saved["clock"])

    def state_dict(self) -> dict[str, Any] | None:
        return None if self.clock is None else {"clock": self.clock.state_dict()}

    def work(self, plan: RoundPlan, state: ServerState, store: ClientStateStore) -> RoundWork:
        if self.clock is not None and plan.training:
            return self._timed_work(plan, state, store)
        cohort = plan.cohort if plan.training else frozenset()
        done = self._dispatch(plan, state, store, plan.evaluated, cohort)
        timing = {} if self.clock is None else {"sim_time": self.clock.time}
        return RoundWork(
            results=done.results,
            worker_results=done.worker_results,
            cohort=set(cohort),
            cohort_label=f"{len(cohort)} clients",
            bytes_down=done.bytes_down,
            timing=timing,
        )

    def commit(
        self, plan: RoundPlan, work: RoundWork, state: ServerState, store: ClientStateStore
    ) -> ServerState:
        store_states(work.results, store)
        step: ClockStep | None = work.pending
        if step is not None:
            assert self.clock is not None
            self.clock.time, self.clock.step = step.outcome.end, step.steps
        if not plan.training or (step is not None and step.outcome.short):
            return state  # a skipped round aggregates nothing
        kept = work.results
        if step is not None:
            counted = set(step.outcome.kept)
            kept = [c for c in work.results if c.client in counted]
        combined = self.deployment.combine(plan.round, [w.sums for w in work.worker_results], kept)
        work.extras = {**combined.metrics, **work.extras}
        individual = {c.client: c.individual for c in kept if c.individual is not None}
        return self.algorithm.aggregate(
            state, combined.sums, individual, plan.context() or self.algorithm.context(plan.round)
        )

    def _dispatch(
        self,
        plan: RoundPlan,
        state: ServerState,
        store: ClientStateStore,
        evaluate: frozenset[int] | set[int],
        train: frozenset[int] | list[int],
    ) -> Dispatched:
        return dispatch(
            self.executor, self.algorithm, plan.round, state, store,
            evaluate=evaluate, train=train,
            prepare=lambda tasks: self.deployment.prepare(
                plan.round, tasks, individual=self.gates
            ),
            context=plan.context(),
        )  # fmt: skip

    def _timed_work(
        self, plan: RoundPlan, state: ServerState, store: ClientStateStore
    ) -> RoundWork:
        """The round's attempts on the clock: select, train, settle who reports in time."""
        clock = self.clock
        assert clock is not None
        began, start, steps = clock.time, clock.time, clock.step
        results: dict[int, ClientResult] = {}
        worker_results, bytes_down, number = [], 0, 0
        while True:
            if self.gates:
                attempt = clock.select(plan.round, number, start, steps)
            else:  # every sampled client reports: the plain cohort, timed
                attempt = clock.plain_attempt(plan.round, sorted(plan.cohort), start, steps)
            evaluate = plan.evaluated if number == 0 else frozenset()
            done = self._dispatch(plan, state, store, evaluate, attempt.trains)
            gone = download_sizes(self.algorithm, state, store, attempt.dropouts)
            bytes_down += done.bytes_down + sum(gone.values())
            trained = [c for c in done.results if c.train_loss is not None or c.failed]
            uploads = {c.client: c.upload_bytes for c in trained}
            outcome = clock.settle(attempt, {**done.downloads, **gone}, uploads)
            steps += 1
            kept = set() if outcome.short else set(outcome.kept)
            for c in done.results:
                earlier = results.get(c.client)
                if c.client in kept:
                    merged = _keep_training(c, earlier)
                else:
                    merged = _without_training(c, earlier)
                if merged is not None:
                    results[c.client] = merged
            worker_results += done.worker_results
            if not clock.retries(outcome):
                break
            start, number = outcome.end, number + 1
        extras = outcome.summary() if self.gates else {}
        extras["round_time"] = outcome.end - began
        if self.gates:
            extras.update(attempts=number + 1, skipped=outcome.short)
        return RoundWork(
            results=sorted(results.values(), key=lambda c: c.client),
            worker_results=worker_results,
            cohort=set() if outcome.short else set(outcome.kept),
            cohort_label=f"{len(outcome.kept)} reporting clients",
            bytes_down=bytes_down,
            timing={"sim_time": began},
            extras=extras,
            pending=ClockStep(outcome, steps),
        )


TRAINING_FIELDS = dict(
    train_loss=None, failed=False, state=None, individual=None, upload_bytes=0,
    upload=None, train_seconds=0.0, sum_seconds=0.0, flops=None, peak_memory=None,
)  # fmt: skip


def _without_training(result: ClientResult, earlier: ClientResult | None) -> ClientResult | None:
    """A client whose update does not count: its evaluation only (None: it has none)."""
    if earlier is not None:
        return earlier  # evaluated in an earlier attempt of the round
    if result.evaluation is None:
        return None
    return dataclasses.replace(result, weights={}, **TRAINING_FIELDS)


def _keep_training(result: ClientResult, earlier: ClientResult | None) -> ClientResult:
    """A kept client's result, with its evaluation from an earlier attempt of the round."""
    if earlier is None or earlier.evaluation is None:
        return result
    return dataclasses.replace(
        result,
        evaluation=earlier.evaluation,
        global_evaluation=earlier.global_evaluation,
        validation=earlier.validation,
        eval_seconds=earlier.eval_seconds,
        held_out=earlier.held_out,
    )
