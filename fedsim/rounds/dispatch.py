"""The one way a round kind hands clients to the executor: build the tasks, run them, order
the results.

``dispatch`` builds one ``ClientTask`` per client (its payload and private state from the
server state and the store; evaluate and/or train; a held-out client, from
``federation.num_clients`` on, is evaluated as a newcomer with no state), lets the caller
attach what the deployment decides (``prepare``), counts what the trained clients download,
and runs the tasks through ``Executor.run_round``, each task with the round's frozen
``RoundContext`` (``context``). Results come back ordered by client, so
nothing depends on which worker ran which client.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from fedsim.algorithms.base import Algorithm, ServerState
from fedsim.round_context import RoundContext
from fedsim.rounds.kind import sorted_results
from fedsim.runtime.executor import Executor
from fedsim.runtime.worker import ClientResult, ClientTask, WorkerResult
from fedsim.storage import ClientStateStore


@dataclass
class Dispatched:
    """A batch of client tasks, run."""

    worker_results: list[WorkerResult]
    downloads: dict[int, int]  # what each training client received: broadcast and payload

    @property
    def bytes_down(self) -> int:
        """The broadcast and payloads the training clients received."""
        return sum(self.downloads.values())

    @property
    def results(self) -> list[ClientResult]:
        return sorted_results(self.worker_results)


def dispatch(
    executor: Executor,
    algorithm: Algorithm,
    round_idx: int,
    state: ServerState,
    store: ClientStateStore,
    *,
    evaluate: Collection[int] = (),
    train: Collection[int] = (),
    prepare: Callable[[list[ClientTask]], None] | None = None,
    context: RoundContext | None = None,
) -> Dispatched:
    """Run round ``round_idx``'s tasks of the clients in ``evaluate`` and ``train``, each
    from ``state`` (see the module docstring)."""
    evaluated, trained = set(evaluate), set(train)
    broadcast = algorithm.broadcast(state)
    members = algorithm.federation.num_clients  # ids from here on: held-out clients
    held_out = [c for c in evaluated if c >= members]
    newcomer_payload = algorithm.newcomer_payload(state) if held_out else {}  # once a round
    tasks = [
        ClientTask(
            client=c,
            payload=algorithm.client_payload(state, c),
            state=store.get(c),
            evaluate=c in evaluated,
            train=c in trained,
            context=context,
        )
        if c < members
        else ClientTask(
            client=c,
            payload=newcomer_payload,
            state=None,
            evaluate=True,
            train=False,
            newcomer=True,
            context=context,
        )
        for c in sorted(evaluated | trained)
    ]
    if prepare is not None:
        prepare(tasks)
    downloads = {
        t.client: algorithm.download_nbytes(broadcast, t.payload, t.state) for t in tasks if t.train
    }
    return Dispatched(executor.run_round(round_idx, broadcast, tasks), downloads)


def download_sizes(
    algorithm: Algorithm, state: ServerState, store: ClientStateStore, clients: Collection[int]
) -> dict[int, int]:
    """What each of ``clients`` would download this round, without running anything (a
    client that drops out mid-round received its model before it went)."""
    broadcast = algorithm.broadcast(state)
    return {
        c: algorithm.download_nbytes(broadcast, algorithm.client_payload(state, c), store.get(c))
        for c in clients
    }
