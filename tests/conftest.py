"""Shared fixtures. Ray starts at most once per test session (~4 s or more), on 2 CPUs:
every test that needs Ray takes ``ray_cluster`` (in this process) or ``ray_address`` (for
a job run in a subprocess, via ``RAY_ADDRESS``) instead of starting its own."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A small local Ray cluster shared by every test that needs one; shut down at the end."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # loopback only: no token files
    os.environ.setdefault("RAY_worker_niceness", "0")  # not starved by other users' processes
    started = not ray.is_initialized()
    if started:
        ray.init(
            address="local",  # our own cluster, even if another one runs here
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=256 * 2**20,
            logging_level=logging.WARNING,
        )
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


@pytest.fixture(scope="session")
def ray_address(ray_cluster: Any) -> str:
    """The shared cluster's address: ``RAY_ADDRESS`` for drivers run as subprocesses
    (``ray_jobs``, ``fedsim run runtime.address=auto``), which join it like a job would."""
    return ray_cluster.get_runtime_context().gcs_address
