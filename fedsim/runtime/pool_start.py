"""Start Ray and the pool's actors before the driver has its data (the slow part of a start).

An actor spends its first seconds importing torch and Lightning; a local Ray takes seconds
to come up. ``start_pool`` does both from the config alone, so the driver can import torch
and build the federation meanwhile (``fedsim run`` does that on a second thread); the
``RayExecutor`` then hands the actors their spec and dataset (``WorkerActor.setup``).
This module imports neither torch nor the worker code.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
import ray

from fedsim.config import RuntimeConfig
from fedsim.runtime.pool_plan import PoolPlan, check_local_workers, plan_pool
from fedsim.runtime.ray_cluster import captured_stderr, join_or_start_ray
from fedsim.runtime.ray_worker import WorkerActor


@dataclass
class StartedPool:
    """Ray joined or started, the pool planned, its actors created (maybe still importing)."""

    plan: PoolPlan
    actors: list[Any]
    owns_ray: bool  # this process started Ray: shut it down when done
    timeline: dict[str, float] = field(default_factory=dict)  # time.time() at each start step
    # what the actors were started with (the user's shipped modules): a pool handed back by
    # ``RayExecutor.detach_pool`` is reused as it is when the next run needs the same
    runtime_env: dict[str, Any] = field(default_factory=dict)

    def actor_class(self, runtime_env: dict[str, Any] | None = None) -> Any:
        """The pool's actor class with its resources (and ``runtime_env``, if any)."""
        return ray.remote(WorkerActor).options(
            num_cpus=self.plan.cpus_per_worker,
            num_gpus=self.plan.gpus_per_worker,
            max_restarts=0,
            max_task_retries=0,
            **({"runtime_env": runtime_env} if runtime_env else {}),
        )

    def close(self, *, quiet: bool = False) -> None:
        """Kill the actors; shut Ray down if this pool started it (idempotent).

        ``quiet``: drop what Ray prints meanwhile (a failed check's one-line error stays the
        only line: killing actors still being placed makes the GCS log an error line)."""
        if quiet:
            with captured_stderr() as held:
                held.discard = True
                self.close()
            return
        actors, self.actors = self.actors, []
        for actor in actors:
            kill_actor(actor)
        if self.owns_ray:
            self.owns_ray = False
            ray.shutdown()


def kill_actor(actor: Any) -> None:
    """Kill ``actor``; one that is dead already is fine."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - it is dead already
        pass


def start_pool(runtime: RuntimeConfig) -> StartedPool:
    """Join or start Ray, plan the pool from the cluster's totals, create its actors.

    Raises ConfigError for a pool the cluster cannot hold (Ray started here is shut down).
    """
    began = time.time()
    return create_pool(runtime, start_ray(runtime), began)


def start_ray(runtime: RuntimeConfig) -> bool:
    """Join the configured Ray, or start a local one; True when this call started it.

    A local Ray is sized to ``runtime.workers``; more workers than this machine's memory can
    hold are refused before it starts."""
    if not (runtime.address or os.environ.get("RAY_ADDRESS")):
        check_local_workers(runtime, psutil.virtual_memory().total)
    cpus = os.cpu_count() or 1
    if runtime.workers is not None:
        cpus = max(cpus, math.ceil(runtime.workers * runtime.cpus_per_worker))
    return join_or_start_ray(
        runtime.address, num_cpus=cpus, connect_timeout_s=runtime.connect_timeout_s
    )


def stop_ray() -> None:
    """Shut down the Ray this process started (``start_ray`` returned True)."""
    ray.shutdown()


def create_pool(
    runtime: RuntimeConfig,
    owns_ray: bool,
    began: float,
    runtime_env: dict[str, Any] | None = None,
) -> StartedPool:
    """Plan the pool on the joined cluster and create its actors (they start importing now).

    ``owns_ray``: Ray was started for this pool (shut down on failure and on ``close``);
    ``began``: ``time.time()`` when Ray's start began (the timeline's first step);
    ``runtime_env``: the user's shipped modules (``plugin_runtime_env``), so the executor
    keeps these actors rather than starting them again with it.
    """
    joined = time.time()
    try:
        resources = ray.cluster_resources()
        plan = plan_pool(runtime, resources.get("CPU", 0.0), resources.get("GPU", 0.0))
        pool = StartedPool(plan=plan, actors=[], owns_ray=owns_ray, runtime_env=runtime_env or {})
        actor_class = pool.actor_class(pool.runtime_env)
        pool.actors = [actor_class.remote() for _ in range(plan.workers)]
    except BaseException:
        if owns_ray:
            ray.shutdown()
        raise
    pool.timeline = {"ray_start_began": began, "ray_started": joined, "actors_created": time.time()}
    return pool
