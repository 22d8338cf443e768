"""The Tune scheduler and search algorithm a search asks for (``tune.scheduler``,
``tune.search_alg``), counted in evaluations (``training_iteration``)."""

from __future__ import annotations

import functools
from typing import Any

from fedsim.search.options import TuneOptions
from fedsim.search.space import Space


def _explore(config: dict[str, Any], spaces: list[Space]) -> dict[str, Any]:
    """PBT's explore step, kept inside the searched spaces (a module-level function:
    Tune pickles the scheduler with the experiment)."""
    by_key = {s.key: s for s in spaces}
    return {k: by_key[k].clip(v) if k in by_key else v for k, v in config.items()}


def make_scheduler(options: TuneOptions, spaces: list[Space], max_t: int) -> Any:
    """ASHA, FIFO or Population Based Training, in evaluations (``training_iteration``;
    ``max_t``: the evaluations of one trial)."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, PopulationBasedTraining

    if options.scheduler == "asha":
        return ASHAScheduler(
            time_attr="training_iteration",
            max_t=max_t,
            grace_period=options.grace_period,
            reduction_factor=options.reduction_factor,
        )
    if options.scheduler == "pbt":
        return PopulationBasedTraining(
            time_attr="training_iteration",
            perturbation_interval=options.perturbation_interval,
            burn_in_period=2,  # the first report is round 0: the initial model, no checkpoint
            hyperparam_mutations={s.key: s.mutation() for s in spaces},
            custom_explore_fn=functools.partial(_explore, spaces=spaces),
            synch=options.pbt_synch,
        )
    return FIFOScheduler()


def make_search_alg(options: TuneOptions, seed: int) -> Any:
    """None (Tune's random sampling and grids) or Optuna's TPE."""
    if options.search_alg != "optuna":
        return None
    from ray.tune.search.optuna import OptunaSearch

    return OptunaSearch(seed=seed)
