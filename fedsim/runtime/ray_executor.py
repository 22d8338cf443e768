"""RayExecutor: a pool of long-lived worker actors, each running many clients per round.

docs/architecture.md, "Runtime": no actor per client (an idle actor costs ~0.8 GB and seconds to
start), one call per worker per round, parameters as numpy buffers, the dataset in the
object store once. Each round the cohort is split largest-first across the workers; each
worker returns one partial aggregate; results come back in worker order, so the reduction
order is fixed. A worker that dies mid-round is replaced and its share re-run from the
pre-round state the tasks still carry, so nothing is lost and the results do not change.
When the replacement cannot be placed (its node is gone and no room is left), the share runs
on a surviving worker, now and in later rounds: the shares stay the same, so do the results.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import ray
from ray.exceptions import RayActorError

from fedsim.config import RuntimeConfig
from fedsim.data.federated import FederatedData
from fedsim.runtime.executor import Executor
from fedsim.runtime.pool_start import StartedPool, kill_actor, start_pool
from fedsim.runtime.scheduling import assign_balanced
from fedsim.runtime.shipping import carries, plugin_runtime_env
from fedsim.runtime.task_cost import task_cost
from fedsim.runtime.worker import (
    Task,
    WorkerResult,
    WorkerSpec,
)
from fedsim.wire import to_wire

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0  # an actor start takes seconds; a cluster may need minutes to scale
REPLACE_TIMEOUT_S = 60.0  # a dead worker's replacement not placed by then: its node is gone


class RayExecutor(Executor):
    """A fixed pool of ``WorkerActor``s; one ``run`` call per worker per round."""

    def __init__(
        self,
        runtime: RuntimeConfig,
        spec: WorkerSpec,
        data: FederatedData,
        *,
        pool: StartedPool | None = None,
        max_failures_per_round: int | None = None,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
        replace_timeout_s: float = REPLACE_TIMEOUT_S,
    ):
        """``pool``: Ray and actors started ahead (``start_pool``); this executor owns them
        from now on. None: start them here."""
        self._pool: StartedPool | None = pool
        self._actors: list[Any] = []
        self._data_ref: Any = None
        self.replace_timeout_s = replace_timeout_s
        try:
            if self._pool is None:
                self._pool = start_pool(runtime)
            self.plan = self._pool.plan
            self.num_workers = self.plan.workers
            self.max_failures_per_round = (
                2 * self.num_workers if max_failures_per_round is None else max_failures_per_round
            )
            self._spec = dataclasses.replace(spec, num_threads=self.plan.threads)
            self._epochs = spec.client.local
            self._train_sizes = data.train_sizes(newcomers=True)  # held-out clients too
            self._test_sizes = data.test_sizes(newcomers=True)
            self._data_ref = ray.put(data)  # once; actors read zero-copy views of its arrays
            self._spec_ref = ray.put(self._spec)
            needed = plugin_runtime_env(spec, data)
            # actors without this run's user modules start again with them; actors that
            # carry them (and maybe more: nothing imports the rest) are kept
            if needed and not carries(self._pool.runtime_env, needed):
                for actor in self._pool.actors:
                    kill_actor(actor)
                self._pool.runtime_env = needed
                actor_class = self._pool.actor_class(needed)
                self._pool.actors = [actor_class.remote() for _ in range(self.num_workers)]
            self.runtime_env = self._pool.runtime_env  # replacements start as the pool did
            self._actor_class = self._pool.actor_class(self.runtime_env)
            self._actors, self._pool.actors = self._pool.actors, []
            for actor in self._actors:
                self._setup(actor)
            # Wait here: startup errors surface now, and startup is not timed as round 0.
            self.worker_info = self._wait_ready(startup_timeout_s)
            self.timeline = {**self._pool.timeline, "actors_ready": time.time()}
        except BaseException:
            self.close()
            raise

    # --- lifecycle ---
    def _wait_ready(self, timeout_s: float) -> list[dict[str, Any]]:
        """Each actor's ``ready()`` info; a clear error if they cannot all be placed in time."""
        refs = [a.ready.remote() for a in self._actors]
        began = time.monotonic()
        while True:
            left = timeout_s - (time.monotonic() - began)
            done, pending = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, min(60, left)))
            if not pending:
                return ray.get(refs)
            free = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            message = (
                f"{len(pending)} of {len(refs)} workers not started after "
                f"{time.monotonic() - began:.0f} s (each needs {self.plan.cpus_per_worker:g} CPU, "
                f"{self.plan.gpus_per_worker:g} GPU; free now: {free})"
            )
            if left <= 60:
                raise RuntimeError(message + "; is another job holding the cluster?")
            log.warning(message)

    def _setup(self, actor: Any) -> None:
        """Give ``actor`` its spec and dataset (actor calls run in order: ``ready`` waits)."""
        actor.setup.remote(self._spec_ref, self._data_ref, self.plan.gpus_per_worker)

    def _new_actor(self) -> Any:
        actor = self._actor_class.remote()
        self._setup(actor)
        return actor

    def detach_pool(self, *, short: bool = False) -> StartedPool:
        """Hand the live actors back as a pool for another run (a sweep of short runs pays
        the actors' start once; each run gives them its own spec and data). This executor
        is closed afterwards; the pool's ``close`` kills the actors. ``short``: a pool that
        lost workers is handed back too, with its survivors (whoever takes it adds the rest)."""
        alive = [actor for actor in self._actors if actor is not None]
        if self._pool is None or not alive or (len(alive) < len(self._actors) and not short):
            raise RuntimeError("no whole pool to hand back (closed, or a worker is gone)")
        pool, self._pool = self._pool, None
        pool.actors, self._actors = alive, []
        self._data_ref = None
        return pool

    def close(self) -> None:
        """Kill the actors; shut down (or disconnect from) Ray if this executor started it."""
        actors, self._actors = self._actors, []
        for actor in actors:
            if actor is not None:
                kill_actor(actor)
        self._data_ref = None
        if self._pool is not None:
            self._pool.close()  # actors not handed over yet; Ray, if the pool started it

    # --- rounds ---
    def run_round(
        self, round_idx: int, broadcast: dict[str, Any], tasks: list[Task]
    ) -> list[WorkerResult]:
        """Split ``tasks`` largest-first into one share per worker; one WorkerResult per share.

        The shares do not depend on which actors are alive: a share whose actor died (or
        whose node is gone) runs on a surviving actor, and the results, merged in share
        order, are the same as an undisturbed pool's.
        """
        if not self._actors:
            raise RuntimeError("RayExecutor is closed")
        results = [WorkerResult() for _ in range(self.num_workers)]
        if not tasks:
            return results
        costs = [task_cost(t, self._train_sizes, self._test_sizes, self._epochs) for t in tasks]
        shares = assign_balanced(costs, self.num_workers)
        round_ = _Round(self, round_idx, ray.put(to_wire(broadcast)))  # one broadcast upload
        for share, indices in enumerate(shares):
            if indices:
                round_.share_refs[share] = ray.put(to_wire([tasks[i] for i in indices]))
                round_.submit(share, self._runner_for(share))
        while round_.pending:
            timeout = round_.seconds_to_next_deadline()
            done, _ = ray.wait(list(round_.pending), num_returns=1, timeout=timeout)
            if not done:
                round_.expire_replacements()
                continue
            kind, share, slot, actor = round_.pending.pop(done[0])
            if kind == "ready":
                round_.replacement_ready(slot, actor, done[0])
                continue
            try:
                results[share] = ray.get(done[0])
            except RayActorError as error:
                round_.share_failed(share, slot, actor, error)
        if "first_round_done" not in self.timeline:
            firsts = [r.first_done_at for r in results if r.first_done_at]
            if firsts:
                self.timeline["first_client_done"] = min(firsts)
            self.timeline["first_round_done"] = time.time()
        return results

    def _live_slots(self) -> list[int]:
        return [slot for slot, actor in enumerate(self._actors) if actor is not None]

    def _runner_for(self, share: int) -> int:
        """The actor slot that runs ``share``: its own, else a surviving one (spread evenly)."""
        if self._actors[share] is not None:
            return share
        live = self._live_slots()
        if not live:
            raise RuntimeError("every Ray worker is gone (their nodes died or were removed)")
        return live[share % len(live)]

    # --- test hook ---
    def crash_worker_on_round(self, worker: int, round_idx: int) -> None:
        """Make worker ``worker`` exit abruptly in the middle of round ``round_idx`` (tests)."""
        ray.get(self._actors[worker].crash_on_round.remote(round_idx))


class _Round:
    """Bookkeeping of one ``run_round``: which share runs where, replacements being placed."""

    def __init__(self, executor: RayExecutor, round_idx: int, broadcast_ref: Any):
        self.executor, self.round_idx, self.broadcast_ref = executor, round_idx, broadcast_ref
        self.share_refs: dict[int, Any] = {}
        # ref -> ("run", share, slot, actor) or ("ready", None, slot, candidate actor)
        self.pending: dict[Any, tuple[str, int | None, int, Any]] = {}
        self.waiting: dict[int, tuple[Any, Any, float, list[int]]] = {}  # slot -> replacement
        self.failures = 0

    def submit(self, share: int, slot: int) -> None:
        actor = self.executor._actors[slot]
        ref = actor.run.remote(self.round_idx, self.broadcast_ref, self.share_refs[share])
        self.pending[ref] = ("run", share, slot, actor)

    def seconds_to_next_deadline(self) -> float | None:
        if not self.waiting:
            return None
        return max(0.0, min(w[2] for w in self.waiting.values()) - time.monotonic())

    def share_failed(self, share: int, slot: int, actor: Any, error: Exception) -> None:
        """``share``'s actor died: wait for its replacement, else run it elsewhere."""
        executor = self.executor
        self.failures += 1
        if self.failures > executor.max_failures_per_round:
            raise RuntimeError(
                f"round {self.round_idx}: {self.failures} worker failures (limit "
                f"{executor.max_failures_per_round}); last: {error}"
            ) from error
        log.warning(
            "round %d: worker %d died (%s) running share %d; starting a replacement",
            self.round_idx,
            slot,
            type(error).__name__,
            share,
        )
        if executor._actors[slot] is actor:  # the first news of this death
            kill_actor(actor)
            executor._actors[slot] = None
            candidate = executor._new_actor()
            deadline = time.monotonic() + executor.replace_timeout_s
            self.waiting[slot] = (candidate, candidate.ready.remote(), deadline, [])
            self.pending[self.waiting[slot][1]] = ("ready", None, slot, candidate)
        if slot in self.waiting:
            self.waiting[slot][3].append(share)
        else:  # this slot's replacement could not be placed: the share moves
            self.submit(share, executor._runner_for(share))

    def replacement_ready(self, slot: int, candidate: Any, ready_ref: Any) -> None:
        """The replacement for ``slot`` answered (or died starting): run its shares."""
        try:
            ray.get(ready_ref)
        except RayActorError:
            self.give_up(slot)
            return
        _, _, _, shares = self.waiting.pop(slot)
        self.executor._actors[slot] = candidate
        for share in shares:
            self.submit(share, slot)

    def expire_replacements(self) -> None:
        """Replacements not placed by their deadline: the cluster has no room (a node left)."""
        now = time.monotonic()
        for slot in [s for s, w in self.waiting.items() if w[2] <= now]:
            self.pending.pop(self.waiting[slot][1], None)
            self.give_up(slot)

    def give_up(self, slot: int) -> None:
        candidate, _, _, shares = self.waiting.pop(slot)
        kill_actor(candidate)
        log.warning(
            "round %d: no room to restart worker %d within %g s; its shares %s run on the "
            "surviving workers, now and in later rounds",
            self.round_idx,
            slot,
            self.executor.replace_timeout_s,
            shares,
        )
        for share in shares:
            if not self.executor._live_slots() and self.waiting:
                # every other worker is itself being replaced: wait for one of those
                next(iter(self.waiting.values()))[3].append(share)
                continue
            self.submit(share, self.executor._runner_for(share))
