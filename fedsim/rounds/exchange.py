"""Exchange rounds: the algorithm drives the round as gradient exchanges (SP-CACW).

Evaluation is the usual ``client_start`` path, before the round; then ``train_round`` runs
as many ``GradientTask`` / ``CurvatureTask`` exchanges as it needs through a plain callable
(``ExchangeRound.exchange``: one ``Executor.exchange`` call each), and returns the new state
and a ``RoundReport``. Nothing is uploaded as a model update, so the deployment's client
and server stages have nothing to act on (``fedsim/rounds/compose.py`` says which options
that refuses).
"""

from __future__ import annotations

from collections.abc import Callable

from fedsim.algorithms.base import Algorithm, ExchangeRound, ServerState
from fedsim.rounds.dispatch import dispatch
from fedsim.rounds.kind import RoundKind, RoundPlan, RoundWork, store_states
from fedsim.storage import ClientStateStore


class ExchangeRounds(RoundKind):
    """A ``trains_by_exchange`` algorithm's rounds: evaluate, then ``train_round``."""

    def __init__(
        self, algorithm: Algorithm, seed: int, lr: Callable[[int], float], batch_size: int
    ):
        self.algorithm = algorithm
        self.seed, self.lr, self.batch_size = seed, lr, batch_size  # lr: of a round

    def context(self, round_idx: int) -> ExchangeRound:
        """What ``train_round`` works with: client settings and the executor's exchange."""
        executor = self.executor
        return ExchangeRound(
            round=round_idx,
            seed=self.seed,
            lr=self.lr(round_idx),
            batch_size=self.batch_size,
            exchange=lambda tasks, broadcast: executor.exchange(round_idx, broadcast, tasks),
        )

    def work(self, plan: RoundPlan, state: ServerState, store: ClientStateStore) -> RoundWork:
        done = dispatch(
            self.executor, self.algorithm, plan.round, state, store,
            evaluate=plan.evaluated, context=plan.context(),
        )  # fmt: skip
        work = RoundWork(results=done.results, worker_results=done.worker_results)
        if plan.training:  # many gradient exchanges, after the round's evaluation
            trained, report = self.algorithm.train_round(state, self.context(plan.round))
            work.pending, work.extras, work.weights = trained, report.summary, report.client_weights
        return work

    def commit(
        self, plan: RoundPlan, work: RoundWork, state: ServerState, store: ClientStateStore
    ) -> ServerState:
        store_states(work.results, store)
        return state if work.pending is None else work.pending
