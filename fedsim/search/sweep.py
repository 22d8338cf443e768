"""``fedsim tune``: validate everything, run the trials on Ray Tune, write the results.

Each trial asks for its resources through one placement group (``resources.py``); every
trial's run folder lands in ``<out>/runs/<trial>/`` and Tune's own records in
``<out>/ray_results/``. With ``tracking.wandb.enabled=true`` every trial logs to W&B in one
group (``tracking.wandb.group`` or ``<name>-tune-<time>``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.config import apply_overrides, config_from_dict
from fedsim.config.compose import read_composed, resolve_interpolations
from fedsim.search.options import given_from_args, resolve_options
from fedsim.search.resources import check_fits, trial_bundles, trial_executor_for, trial_runtime
from fedsim.search.results import (
    TrialRow,
    collect_rows,
    finite,
    print_table,
    write_best_yaml,
    write_trials_csv,
)
from fedsim.search.space import parse_space, validate_search
from fedsim.search.trial import SweepSettings, evaluations, run_trial


@dataclass
class TuneOutcome:
    """What a search leaves: its rows (best first) and the files written."""

    rows: list[TrialRow]
    trials_csv: Path
    best_yaml: Path | None


def load_tune_config(
    config: str | Path, overrides: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(experiment raw dict with overrides applied, ``tune:`` section) of a YAML file."""
    raw = read_composed(config)  # its base configs merged in
    section = raw.pop("tune", None) or {}
    return resolve_interpolations(apply_overrides(raw, overrides)), section


def run_tune(config: str | Path, overrides: list[str], **given: Any) -> TuneOutcome:
    """Validate everything, run the search on Ray, write trials.csv and best.yaml.

    ``given``: TuneOptions fields (``search`` as KEY=SPACE strings); those left out or None
    come from the config's ``tune:`` section, else the TuneOptions defaults.
    """
    raw, section = load_tune_config(config, overrides)
    options = resolve_options(section, given)
    cfg = config_from_dict(raw)
    base = cfg.to_dict()
    base["data"]["root"] = str(Path(base["data"]["root"]).resolve())  # trials run elsewhere
    spaces = [parse_space(f"{key}={space}") for key, space in options.search.items()]
    validate_search(base, spaces)
    executor = trial_executor_for(cfg.runtime, options.trial_executor)
    bundles = trial_bundles(cfg.runtime, executor)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = options.out if options.out is not None else Path("runs") / f"{cfg.name}-tune-{stamp}"
    out_dir = Path(out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    wandb = cfg.tracking.wandb
    settings = SweepSettings(
        out=str(out_dir),
        metric=options.metric,
        mode=options.mode,
        wandb_group=(wandb.group or f"{cfg.name}-tune-{stamp}") if wandb.enabled else None,
        report=options.report,
        forced=trial_runtime(cfg.runtime, executor),
    )

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from fedsim.runtime.ray_cluster import join_or_start_ray

    started = join_or_start_ray(options.address)
    try:
        check_fits(bundles, ray.cluster_resources())
        scheduler = (
            ASHAScheduler(
                time_attr="training_iteration",
                max_t=evaluations(cfg),
                grace_period=options.grace_period,
                reduction_factor=options.reduction_factor,
            )
            if options.scheduler == "asha"
            else FIFOScheduler()
        )
        trainable = tune.with_resources(
            tune.with_parameters(run_trial, base=base, settings=settings),
            tune.PlacementGroupFactory(bundles),
        )
        tuner = tune.Tuner(
            trainable,
            param_space={s.key: s.to_tune() for s in spaces},
            tune_config=tune.TuneConfig(
                metric=options.metric,
                mode=options.mode,
                scheduler=scheduler,
                num_samples=options.samples,
                max_concurrent_trials=options.max_concurrent,
                reuse_actors=True,  # later trials skip the ~5 s torch import and data load
            ),
            run_config=tune.RunConfig(
                name="tune",
                storage_path=str(out_dir / "ray_results"),
                verbose=0 if options.quiet else 1,
            ),
        )
        results = tuner.fit()
    finally:
        if started:
            ray.shutdown()
    keys = [s.key for s in spaces]
    rows = collect_rows(results, cfg, out_dir, options.metric, options.mode)
    trials_csv = write_trials_csv(out_dir / "trials.csv", rows, keys, options.metric)
    ok = [r for r in rows if finite(r.best)]
    best_yaml = (
        write_best_yaml(out_dir / "best.yaml", base, ok[0], options.metric, options.mode, len(rows))
        if ok
        else None
    )
    title = f"{cfg.name}: {len(rows)} trials ({options.scheduler})"
    print_table(rows, keys, options.metric, title)
    return TuneOutcome(rows=rows, trials_csv=trials_csv, best_yaml=best_yaml)


def run_from_args(args: argparse.Namespace) -> int:
    """``fedsim tune`` from parsed arguments; 0 when a best config was written."""
    outcome = run_tune(args.config, args.overrides, **given_from_args(args))
    print(f"trials: {outcome.trials_csv}")
    if outcome.best_yaml is None:
        print("no trial reported the metric", file=sys.stderr)
        return 1
    print(f"best config: {outcome.best_yaml}  (fedsim run {outcome.best_yaml})")
    return 0
