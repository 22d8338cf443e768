"""A faster ``fedsim run`` on Ray: Ray starts while the driver imports torch and checks.

Importing torch and Lightning takes the driver seconds, and a local Ray takes seconds to come
up; one after the other, they were most of a run's start. Here the driver's imports and the
checks that need the data (building the federation, the model and the algorithm) run on a
second thread while this one starts Ray. The worker actors are created only once those
checks passed (bad input still starts no worker): each then imports torch in its own process.
A check that fails stops the Ray it started before the one-line error.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedsim.config import ExperimentConfig

if TYPE_CHECKING:
    from fedsim.runtime.pool_start import StartedPool
    from fedsim.simulation import Simulation


@dataclass
class EarlyStart:
    """The checked simulation and the started pool, for ``run_experiment``."""

    simulation: Simulation
    pool: StartedPool


def start_early(cfg: ExperimentConfig, *, resume: bool = False) -> EarlyStart | None:
    """Build ``cfg``'s simulation on a thread while Ray starts here; then create the pool.

    None where a run starts its pool itself: the local executor, a resumed run, and GPUs
    asked for by name (checked against this machine before anything starts). Raises what
    building the simulation raises (ConfigError for bad input), after stopping Ray.
    """
    runtime = cfg.runtime
    if (
        runtime.executor != "ray"
        or resume
        or runtime.device.startswith("cuda")
        or (runtime.gpus_per_worker or 0) > 0
    ):
        return None
    from fedsim.runtime.pool_start import create_pool, start_ray, stop_ray  # Ray, first

    built: dict[str, Any] = {}
    builder = threading.Thread(target=_build, args=(cfg, built), name="fedsim-build", daemon=True)
    began = time.time()
    builder.start()
    try:
        owns_ray = start_ray(runtime)
    finally:
        builder.join()
    if "error" in built:
        if owns_ray:
            stop_ray()
        raise built["error"]
    return EarlyStart(built["simulation"], create_pool(runtime, owns_ray, began))


def _build(cfg: ExperimentConfig, built: dict[str, Any]) -> None:
    """Import the driver's modules and build the simulation (its errors go to ``built``)."""
    try:
        from fedsim.simulation import Simulation

        built["simulation"] = Simulation(cfg)
    except BaseException as error:  # noqa: BLE001 - re-raised on the main thread
        built["error"] = error
