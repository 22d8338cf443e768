"""A faster ``fedsim run`` on Ray: Ray and the workers start while the driver builds.

Importing torch and Lightning takes the driver and every worker seconds, and a local Ray
takes seconds to come up; one after the other, they were most of a run's start. Once the
config itself is valid (every key and value, the run folder: checked without torch), the
driver's imports and the checks that need the data (building the federation, the model and
the algorithm) run on a second thread while this one starts Ray and creates the worker
actors, which import torch and Lightning in their own processes meanwhile. Nothing is
written before every check passed; a check that fails stops the actors and the Ray it
started before the one-line error, so no process is left behind.
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
    """Build ``cfg``'s simulation on a thread while Ray and the pool's actors start here.

    None where a run starts its pool itself: the local executor, a resumed run, and GPUs
    asked for by name (checked against this machine before anything starts). Raises what
    building the simulation raises (ConfigError for bad input), after stopping the actors
    and the Ray this call started.
    """
    runtime = cfg.runtime
    if (
        runtime.executor != "ray"
        or resume
        or runtime.device.startswith("cuda")
        or (runtime.gpus_per_worker or 0) > 0
    ):
        return None
    from fedsim.runtime.pool_start import create_pool, start_ray  # Ray, first

    built: dict[str, Any] = {}
    builder = threading.Thread(target=_build, args=(cfg, built), name="fedsim-build", daemon=True)
    began = time.time()
    builder.start()
    try:  # start_ray / create_pool stop what they started when they fail
        pool = create_pool(runtime, start_ray(runtime), began)  # actors start importing now
    finally:
        builder.join()
    if "error" in built:  # a failed check: no worker and no Ray of ours left behind
        pool.close(quiet=True)
        raise built["error"]
    return EarlyStart(built["simulation"], pool)


def _build(cfg: ExperimentConfig, built: dict[str, Any]) -> None:
    """Import the driver's modules and build the simulation (its errors go to ``built``)."""
    try:
        from fedsim.simulation import Simulation

        built["simulation"] = Simulation(cfg)
    except BaseException as error:  # noqa: BLE001 - re-raised on the main thread
        built["error"] = error
