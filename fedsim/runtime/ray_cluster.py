"""Join or start Ray once, the same way for the executor, Tune searches and reproductions."""

from __future__ import annotations

import logging
import os

import ray


def join_or_start_ray(
    address: str | None, num_cpus: int | None = None, py_modules: list[str] | None = None
) -> bool:
    """Use the Ray this process already joined, else ``address`` / ``RAY_ADDRESS``, else
    start a private local cluster (``num_cpus``: None = every core).

    ``py_modules``: local modules or packages of user code (``fedsim.plugins``) that every
    worker of this job imports (Ray uploads them once); ignored when Ray was already
    joined, where the executor ships them per actor.
    Returns True when this call initialized Ray, so the caller shuts it down when done.
    """
    if ray.is_initialized():
        return False
    job = {"runtime_env": {"py_modules": list(py_modules)}} if py_modules else {}
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING, **job)
        return True
    # A private cluster on loopback: no token auth files (DESIGN.md). Workers at normal
    # priority: they are the job (Ray's default nice 15 starves them on a busy machine).
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(
        address="local",  # a new cluster, even if another one runs on this machine
        num_cpus=num_cpus,
        include_dashboard=False,
        logging_level=logging.WARNING,
        **job,
    )
    return True
