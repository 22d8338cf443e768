"""Local rounds: the sampled cohort trains locally, the server aggregates (synchronous FL).

One ``run_round`` per round: every evaluated or sampled client gets one task (evaluate,
then train); the deployment's client stages run in the worker after training, its server
stages on the driver before ``aggregate`` (``fedsim/deployment/``). With
``asynchronous.speeds`` set, the round's ``sim_time`` comes from a ``SyncTimeline``.
"""

from __future__ import annotations

from fedsim.algorithms.base import Algorithm, ServerState
from fedsim.deployment.driver import Deployment
from fedsim.rounds.dispatch import dispatch
from fedsim.rounds.kind import RoundKind, RoundPlan, RoundWork, store_states
from fedsim.rounds.schedule import SyncTimeline
from fedsim.storage import ClientStateStore


class LocalRounds(RoundKind):
    """Sample, train locally, aggregate (FedAvg's round, and every algorithm's but two)."""

    def __init__(
        self, algorithm: Algorithm, deployment: Deployment, timeline: SyncTimeline | None = None
    ):
        self.algorithm, self.deployment, self.timeline = algorithm, deployment, timeline

    def work(self, plan: RoundPlan, state: ServerState, store: ClientStateStore) -> RoundWork:
        cohort = plan.cohort if plan.training else frozenset()
        done = dispatch(
            self.executor, self.algorithm, plan.round, state, store,
            evaluate=plan.evaluated, train=cohort,
            prepare=lambda tasks: self.deployment.prepare(plan.round, tasks),
        )  # fmt: skip
        timing = {} if self.timeline is None else {"sim_time": self.timeline.time_at(plan.round)}
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
        if not plan.training:
            return state
        combined = self.deployment.combine(
            plan.round, [w.sums for w in work.worker_results], work.results
        )
        work.extras = {**combined.metrics, **work.extras}
        individual = {c.client: c.individual for c in work.results if c.individual is not None}
        return self.algorithm.aggregate(state, combined.sums, individual, plan.round)
