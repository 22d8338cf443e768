"""``fedsim tune``: validate everything, run the trials on Ray Tune, write the results.

Each trial asks for its resources through one placement group (``resources.py``); every
trial's run folder lands in ``<out>/runs/<trial>/`` and Tune's own records (with each
trial's reported checkpoints) in ``<out>/ray_results/``. ``<out>/search.json`` holds the
validated search (config, options, W&B group): ``fedsim tune --resume OUT`` continues an
interrupted search from it (``Tuner.restore``; unfinished trials continue from their last
reported checkpoint). With ``tracking.wandb.enabled=true`` every trial logs to W&B in one
group (``tracking.wandb.group`` or ``<name>-tune-<time>``), its sampled values as top-level
W&B config keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedsim.config import ExperimentConfig, apply_overrides, config_from_dict
from fedsim.config.compose import read_composed, resolve_interpolations
from fedsim.errors import ConfigError
from fedsim.metrics import VAL_PREFIX
from fedsim.search.options import TuneOptions, given_from_args, resolve_options
from fedsim.search.resources import check_fits, trial_bundles, trial_executor_for, trial_runtime
from fedsim.search.results import (
    TrialRow,
    close_stopped_runs,
    collect_rows,
    finite,
    print_table,
    write_best_yaml,
    write_trials_csv,
)
from fedsim.search.schedulers import (  # noqa: F401  _explore: where searches pickled
    _explore,  # before it moved (PBT's explore step) find it on --resume
    make_scheduler,
    make_search_alg,
)
from fedsim.search.space import Space, changes_mid_run, parse_space, validate_search
from fedsim.search.trial import SweepSettings, evaluations, run_trial

STATE = "search.json"  # the validated search, for --resume
EXPERIMENT = "tune"  # <out>/ray_results/<EXPERIMENT>: Tune's experiment folder


@dataclass
class TuneOutcome:
    """What a search leaves: its rows (best first) and the files written; ``interrupted``:
    some trials did not finish (``fedsim tune --resume out_dir`` continues them)."""

    rows: list[TrialRow]
    trials_csv: Path
    best_yaml: Path | None
    out_dir: Path | None = None
    interrupted: bool = False


@dataclass
class Search:
    """A validated search: what a new search and a resumed one start from."""

    base: dict[str, Any]  # the resolved experiment config (data.root absolute)
    cfg: ExperimentConfig
    options: TuneOptions
    spaces: list[Space]
    bundles: list[dict[str, float]]
    out_dir: Path
    settings: SweepSettings

    @property
    def experiment(self) -> Path:
        return self.out_dir / "ray_results" / EXPERIMENT


def load_tune_config(
    config: str | Path, overrides: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(experiment raw dict with overrides applied, ``tune:`` section) of a YAML file."""
    raw = read_composed(config)  # its base configs merged in
    section = raw.pop("tune", None) or {}
    return resolve_interpolations(apply_overrides(raw, overrides)), section


def require_optuna() -> None:
    """ConfigError in one line unless Optuna can be imported (``--search-alg optuna``)."""
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--search-alg", "optuna", "needs Optuna, which is not installed: "
            "pip install 'fedsim-pfl[optuna]' (or pip install optuna)",
        ) from None  # fmt: skip


def check_strategy(options: TuneOptions, spaces: list[Space]) -> None:
    """What a scheduler and a search algorithm can do with these spaces (before Ray)."""
    if options.search_alg == "optuna":
        grid = [s for s in spaces if s.kind == "grid"]
        if grid:
            raise ConfigError(
                "--search", f"{grid[0].key}=grid(...)", "optuna chooses every value itself: "
                "search this key with choice(...) (or use --search-alg random)",
            )  # fmt: skip
        if options.scheduler == "pbt":
            raise ConfigError(
                "--search-alg", "optuna", "Population Based Training chooses the values "
                "itself: use --search-alg random with --scheduler pbt",
            )  # fmt: skip
        require_optuna()
    if options.pbt_synch and options.scheduler != "pbt":
        raise ConfigError(
            "--pbt-synch", "true", f"acts only with --scheduler pbt (not {options.scheduler})"
        )
    if options.scheduler == "pbt":
        for space in spaces:
            if not changes_mid_run(space.key):
                raise ConfigError(
                    "--search", space.key, "Population Based Training changes searched values "
                    "in the middle of a run; only client.*, algorithm.* (not algorithm.name) "
                    "and join_ratio can change there: search this key with asha or fifo",
                )  # fmt: skip


def plan_search(
    raw: dict[str, Any], options: TuneOptions, wandb_group: str | None = None
) -> Search:
    """Validate the config, every space and the options together; nothing starts."""
    cfg = config_from_dict(raw)
    if options.metric.startswith(VAL_PREFIX) and not cfg.eval.validation_ratio:
        raise ConfigError("--metric", options.metric, "needs a validation split: set "
                          "eval.validation_ratio (e.g. 0.1)")  # fmt: skip
    base = cfg.to_dict()
    base["data"]["root"] = str(Path(base["data"]["root"]).resolve())  # trials run elsewhere
    spaces = [parse_space(f"{key}={space}") for key, space in options.search.items()]
    validate_search(base, spaces)
    check_strategy(options, spaces)
    executor = trial_executor_for(cfg.runtime, options.trial_executor)
    bundles = trial_bundles(cfg.runtime, executor)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = options.out if options.out is not None else Path("runs") / f"{cfg.name}-tune-{stamp}"
    out_dir = Path(out).resolve()
    wandb = cfg.tracking.wandb
    if wandb.enabled and wandb_group is None:
        wandb_group = wandb.group or f"{cfg.name}-tune-{stamp}"
    settings = SweepSettings(
        out=str(out_dir),
        metric=options.metric,
        mode=options.mode,
        wandb_group=wandb_group if wandb.enabled else None,
        report=options.report,
        # a checkpoint at every evaluation: each report carries the state it measured
        forced={**trial_runtime(cfg.runtime, executor), "checkpoint_every": cfg.eval_every},
        may_change=tuple(s.key for s in spaces) if options.scheduler == "pbt" else (),
    )
    return Search(base, cfg, options, spaces, bundles, out_dir, settings)


def write_state(search: Search) -> None:
    """``<out>/search.json``: the config, the options and the W&B group of the search."""
    state = {
        "config": search.base,
        "options": dataclasses.asdict(search.options),
        "wandb_group": search.settings.wandb_group,
    }
    (search.out_dir / STATE).write_text(json.dumps(state, indent=1))


def run_tune(
    config: str | Path, overrides: list[str], *, callbacks: list[Any] | None = None, **given: Any
) -> TuneOutcome:
    """Validate everything, run the search on Ray, write trials.csv and best.yaml.

    ``given``: TuneOptions fields (``search`` as KEY=SPACE strings); those left out or None
    come from the config's ``tune:`` section, else the TuneOptions defaults. ``callbacks``:
    Ray Tune callbacks of the experiment.
    """
    raw, section = load_tune_config(config, overrides)
    search = plan_search(raw, resolve_options(section, given))
    if (search.out_dir / STATE).exists():
        raise ConfigError(
            "--out", str(search.out_dir), "already holds a search: continue it with "
            f"fedsim tune --resume {search.out_dir}, or pick a new folder",
        )  # fmt: skip
    search.out_dir.mkdir(parents=True, exist_ok=True)
    write_state(search)
    return fit(search, restore=False, callbacks=callbacks)


def resume_tune(
    out: str | Path,
    *,
    address: str | None = None,
    quiet: bool | None = None,
    callbacks: list[Any] | None = None,
) -> TuneOutcome:
    """Continue the search in ``out`` (interrupted: Ctrl-C, a lost driver) as it was started:
    finished trials are kept, unfinished ones continue from their last reported checkpoint,
    trials not started yet start. ``address``/``quiet``: as for a new search."""
    out_dir = Path(out).resolve()
    try:
        state = json.loads((out_dir / STATE).read_text())
    except (OSError, ValueError):
        raise ConfigError(
            "--resume", str(out), f"holds no fedsim tune search (no readable {STATE})"
        ) from None
    options = TuneOptions(**state["options"])
    options.address = address if address is not None else options.address
    options.quiet = quiet if quiet is not None else options.quiet
    options.out = str(out_dir)  # the folder may have moved
    search = plan_search(state["config"], options, state.get("wandb_group"))
    return fit(search, restore=True, callbacks=callbacks)


def fit(search: Search, *, restore: bool, callbacks: list[Any] | None = None) -> TuneOutcome:
    """Run (or restore and continue) the search on Ray; write trials.csv and best.yaml."""
    import ray
    from ray import tune

    from fedsim.runtime.ray_cluster import join_or_start_ray

    options, out_dir = search.options, search.out_dir
    if restore and not tune.Tuner.can_restore(str(search.experiment)):
        raise ConfigError(
            "--resume", str(out_dir), f"has no Tune experiment to continue in {search.experiment}"
        )
    started = join_or_start_ray(options.address)
    try:
        check_fits(search.bundles, ray.cluster_resources())
        trainable = tune.with_resources(
            tune.with_parameters(run_trial, base=search.base, settings=search.settings),
            tune.PlacementGroupFactory(search.bundles),
        )
        if restore:
            tuner = tune.Tuner.restore(str(search.experiment), trainable, resume_unfinished=True)
        else:
            tuner = tune.Tuner(
                trainable,
                param_space={s.key: s.to_tune() for s in search.spaces},
                tune_config=tune.TuneConfig(
                    metric=options.metric,
                    mode=options.mode,
                    scheduler=make_scheduler(options, search.spaces, evaluations(search.cfg)),
                    search_alg=make_search_alg(options, search.cfg.seed),
                    num_samples=options.samples,
                    max_concurrent_trials=options.max_concurrent,
                    reuse_actors=True,  # later trials skip the ~5 s torch import and data load
                ),
                run_config=tune.RunConfig(
                    name=EXPERIMENT,
                    storage_path=str(out_dir / "ray_results"),
                    verbose=0 if options.quiet else 1,
                    callbacks=callbacks,
                    # PBT may clone a checkpoint a few reports old; others need the newest
                    checkpoint_config=tune.CheckpointConfig(
                        num_to_keep=4 if options.scheduler == "pbt" else 2
                    ),
                ),
            )
        results = tuner.fit()
    finally:
        if started:
            ray.shutdown()
        shutil.rmtree(out_dir / ".staging", ignore_errors=True)  # reports cut short
    return write_results(search, results)


def write_results(search: Search, results: Any) -> TuneOutcome:
    """trials.csv, best.yaml, stopped trials' summary.json and the table."""
    options, out_dir = search.options, search.out_dir
    keys = [s.key for s in search.spaces]
    rows = collect_rows(results, search.cfg, out_dir, options.metric, options.mode)
    close_stopped_runs(rows, search.cfg.rounds, options.report)
    trials_csv = write_trials_csv(out_dir / "trials.csv", rows, keys, options.metric)
    ok = [r for r in rows if finite(r.best)]
    best_yaml = (
        write_best_yaml(
            out_dir / "best.yaml", search.base, ok[0], options.metric, options.mode, len(rows)
        )
        if ok
        else None
    )
    how = options.scheduler + (", optuna" if options.search_alg == "optuna" else "")
    print_table(rows, keys, options.metric, f"{search.cfg.name}: {len(rows)} trials ({how})")
    interrupted = any(r.status == "unfinished" for r in rows)
    return TuneOutcome(rows, trials_csv, best_yaml, out_dir, interrupted)


RESUME_WITH = ("address", "quiet")  # the options --resume takes: where and how it runs


def run_from_args(args: argparse.Namespace) -> int:
    """``fedsim tune`` from parsed arguments; 0 when a best config was written."""
    given = given_from_args(args)
    if args.resume is not None:
        extra = [n for n, v in given.items() if v not in (None, []) and n not in RESUME_WITH]
        if args.config is not None or args.overrides or extra:
            what = args.config or (args.overrides or ["--" + n.replace("_", "-") for n in extra])[0]
            raise ConfigError(
                "--resume", args.resume, f"continues the search as it was started; {what} "
                "cannot be given with it (only --address and --quiet)",
            )  # fmt: skip
        outcome = resume_tune(args.resume, address=given["address"], quiet=given["quiet"])
    else:
        if args.config is None:
            raise ConfigError("config", None, "give a YAML config (or --resume DIR)")
        outcome = run_tune(args.config, args.overrides, **given)
    print(f"trials: {outcome.trials_csv}")
    if outcome.interrupted:
        print(
            f"fedsim: search interrupted; continue it with: fedsim tune --resume {outcome.out_dir}",
            file=sys.stderr,
        )
        return 130
    if outcome.best_yaml is None:
        print("no trial reported the metric", file=sys.stderr)
        return 1
    print(f"best config: {outcome.best_yaml}  (fedsim run {outcome.best_yaml})")
    return 0
