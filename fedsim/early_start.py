"""``fedsim run``'s start: every check first, then the executor, then (on Ray) the pool.

Building the simulation checks everything that needs only the config, the data and the
model (a wrong column, a model that does not fit the data, an algorithm's requirement), so
it runs before anything waits for Ray: a mistake is one line in the time ``--check`` takes,
and no Ray process is started for it. The executor is then chosen once from the built run
(``runtime.executor=auto``: ``fedsim/runtime/executor_choice.py``) and said in one line; on
Ray, Ray and the worker actors start here, and the run takes them over.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedsim.config import ExperimentConfig
from fedsim.runtime.executor_choice import ExecutorChoice, RunWork, choose_executor

if TYPE_CHECKING:
    from fedsim.runtime.pool_start import StartedPool
    from fedsim.simulation import Simulation


@dataclass
class EarlyStart:
    """The checked simulation, the executor chosen, and the started pool (None: the run
    starts its executor itself)."""

    simulation: Simulation
    choice: ExecutorChoice
    pool: StartedPool | None = None


def start_early(cfg: ExperimentConfig, *, resume: bool = False) -> EarlyStart:
    """Build ``cfg``'s simulation (raises ConfigError for bad input, before any Ray), choose
    its executor, and start Ray's pool when the run is Ray's and starts its own pool here.

    A run starts its pool itself (``pool`` None) on the local executor, when resumed, and
    with GPUs asked for by name (checked against this machine first).
    """
    from fedsim.runtime.factory import check_runtime
    from fedsim.simulation import Simulation

    simulation = Simulation(cfg)
    choice = choose_executor(cfg.runtime, RunWork.of(simulation))
    runtime = choice.runtime(cfg.runtime)
    check_runtime(runtime)
    if (
        runtime.executor != "ray"
        or resume
        or runtime.device.startswith("cuda")
        or (runtime.gpus_per_worker or 0) > 0
    ):
        return EarlyStart(simulation, choice)
    if choice.auto:
        print(choice.line(), file=sys.stderr)
    from fedsim.runtime.pool_start import create_pool, start_ray, stop_ray
    from fedsim.runtime.shipping import plugin_runtime_env

    began = time.time()  # start_ray / create_pool stop what they started when they fail
    owns_ray = start_ray(runtime)
    try:  # the user's modules, shipped with the actors from their start (not a restart)
        runtime_env = plugin_runtime_env(simulation.worker_spec, simulation.data)
    except BaseException:
        if owns_ray:
            stop_ray()
        raise
    return EarlyStart(simulation, choice, create_pool(runtime, owns_ray, began, runtime_env))
