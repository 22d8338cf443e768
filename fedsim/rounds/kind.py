"""The round-kind seam: how one round's training result comes about.

``RoundLoop`` (loop.py) does what every run does each round; a *round kind*, chosen once
when the run is built, does the round's work and commits it:

- ``work(plan, state, store)`` runs the round's client tasks (and whatever else the kind
  needs) and returns a ``RoundWork``; it changes nothing the next round reads, so a Ctrl-C
  during it leaves the last committed round intact;
- ``commit(plan, work, state, store)`` applies it (client states stored, the aggregate
  made) and returns the new server state; the loop calls it with Ctrl-C held back;
- ``state_dict`` / ``load_state_dict``: what a checkpoint must hold beyond the server and
  client states (the buffered kind's clients in flight and virtual clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedsim.algorithms.base import ServerState
from fedsim.round_context import RoundContext
from fedsim.run_plan import ScheduledValues
from fedsim.runtime.executor import Executor
from fedsim.runtime.worker import ClientResult, WorkerResult
from fedsim.storage import ClientStateStore


@dataclass(frozen=True)
class RoundPlan:
    """Round ``round`` as the loop plans it: who is evaluated, who the sampled cohort is."""

    round: int
    training: bool  # False in the final, evaluation-only round
    evaluated: frozenset[int]  # evaluated this round (evaluation rounds: the algorithm's choice)
    cohort: frozenset[int]  # the clients sampled to train (join_ratio); a kind may not use it
    scheduled: ScheduledValues | None = field(default=None, compare=False)  # the run plan's

    def context(self, round_idx: int | None = None) -> RoundContext | None:
        """The frozen context of this round (or of ``round_idx``: an asynchronous client's
        server version), as the driver's algorithm and the client tasks get it."""
        if self.scheduled is None:
            return None
        return self.scheduled.at(self.round if round_idx is None else round_idx)


@dataclass
class RoundWork:
    """A round's work, done but not yet committed."""

    results: list[ClientResult]  # every client result (evaluations and training), by client
    worker_results: list[WorkerResult]
    cohort: set[int] = field(default_factory=set)  # who trained: the failure fraction's base
    cohort_label: str = "clients"  # how the divergence error names them ("10 clients")
    bytes_down: int = 0  # what the trained clients downloaded
    timing: dict[str, Any] = field(default_factory=dict)  # {"sim_time": t} on a virtual clock
    # summary keys of the kind itself; ``commit`` adds the server stages' (clip_norm, epsilon)
    extras: dict[str, Any] = field(default_factory=dict)
    weights: dict[int, float] | None = None  # clients.csv ``weight`` (None: aggregate shares)
    pending: Any = None  # what ``commit`` applies (the kind's own)

    @property
    def failed(self) -> list[int]:
        """Clients whose training turned non-finite (left out of the aggregate)."""
        return [c.client for c in self.results if c.failed]


class RoundKind:
    """Base of the round kinds: override ``work`` and ``commit``."""

    executor: Executor

    def start(self, executor: Executor, state: ServerState, saved: Any = None) -> None:
        """Before the first round: the executor to run on, and the kind's checkpointed state
        (``saved``: a resumed run's ``state_dict()``, else None)."""
        self.executor = executor

    def work(self, plan: RoundPlan, state: ServerState, store: ClientStateStore) -> RoundWork:
        raise NotImplementedError

    def commit(
        self, plan: RoundPlan, work: RoundWork, state: ServerState, store: ClientStateStore
    ) -> ServerState:
        raise NotImplementedError

    def state_dict(self) -> Any:
        """What a checkpoint must keep of the kind (None: nothing)."""
        return None


def store_states(results: list[ClientResult], store: ClientStateStore) -> None:
    """Keep every client's new private state (None: its state did not change)."""
    for c in results:
        if c.state is not None:
            store.put(c.client, c.state)


def sorted_results(worker_results: list[WorkerResult]) -> list[ClientResult]:
    """Every worker's client results, by client (the order does not depend on the workers)."""
    return sorted((c for w in worker_results for c in w.clients), key=lambda c: c.client)
