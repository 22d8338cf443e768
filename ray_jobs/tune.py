"""Ray Tune hyperparameter search over fedsim experiments (``fedsim tune``).

    fedsim tune configs/quickstart.yaml rounds=20 algorithm.name=fedprox algorithm.mu=0.01 \\
        --search client.lr='loguniform(0.001,0.1)' --search algorithm.mu='choice(0,0.01,0.1)' \\
        --samples 16 --scheduler asha --metric acc_weighted --mode max --out runs/tune-prox

Options and spaces can also live in the config file, in a ``tune:`` section next to the
experiment (``configs/tune/*.yaml``); command-line values win::

    tune:
      search:
        algorithm.wdr_lambda: loguniform(10, 2000)
      samples: 16
      scheduler: asha
      metric: acc_weighted

Each trial is a full simulation that reports its summary metrics after every evaluated
round (``training_iteration`` = evaluations so far), so ASHA can stop bad trials early.
Spaces: ``loguniform(a,b)``, ``uniform(a,b)``, ``randint(a,b)`` (a <= v < b),
``choice(v1,v2,...)`` (sampled) and ``grid(v1,v2,...)`` (every value, ``--samples`` times).

Resources: every trial asks for its workers through one placement group, so concurrent
trials never oversubscribe a cluster. By default a trial runs its clients in-process with
the local executor (one bundle of ``runtime.cpus_per_worker`` CPUs). With
``--trial-executor ray`` (the default ``auto`` picks it when ``runtime.gpus_per_worker > 0``)
a trial runs a Ray worker pool inside its placement group: one 1-CPU bundle for the trial
driver plus ``runtime.workers`` (default 1) bundles of ``cpus_per_worker`` CPUs and
``gpus_per_worker`` GPUs, so e.g. ``gpus_per_worker=0.25`` puts four trials on one GPU.

Results: a table in the terminal, ``<out>/trials.csv``, ``<out>/best.yaml`` (ready to run:
``fedsim run <out>/best.yaml``), each trial's run folder in ``<out>/runs/<trial>/`` and Tune's
own records in ``<out>/ray_results/``. With ``tracking.wandb.enabled=true`` every trial logs
to W&B in one group (``tracking.wandb.group`` or ``<name>-tune-<time>``). On a multi-node
cluster ``--out`` must be on a filesystem every node shares.

Cluster: ``ray job submit --working-dir . -- python -m ray_jobs.tune CONFIG --search ...``
(connects to ``RAY_ADDRESS``); ``fedsim tune`` starts a local Ray unless ``--address`` or
``RAY_ADDRESS`` names a cluster.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import logging
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedsim.config import (
    ExperimentConfig,
    RuntimeConfig,
    apply_overrides,
    config_from_dict,
    read_yaml_mapping,
)
from fedsim.errors import ConfigError
from fedsim.metrics import SUMMARY_KEYS
from fedsim.tracking.base import RoundRecord, Sink

METRICS = (*SUMMARY_KEYS, "train_loss")
SPACE_KINDS = ("loguniform", "uniform", "randint", "choice", "grid")
_SPACE = re.compile(r"^\s*([a-z]+)\s*\((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class Space:
    """One searched key: ``kind`` in SPACE_KINDS and its arguments."""

    key: str
    kind: str
    args: tuple[Any, ...]

    def to_tune(self) -> Any:
        """The Ray Tune domain (imports Ray)."""
        from ray import tune

        if self.kind == "loguniform":
            return tune.loguniform(*self.args)
        if self.kind == "uniform":
            return tune.uniform(*self.args)
        if self.kind == "randint":
            return tune.randint(*self.args)
        if self.kind == "choice":
            return tune.choice(list(self.args))
        return tune.grid_search(list(self.args))

    def extremes(self) -> list[Any]:
        """Values that bound the space (checked against the config before any trial)."""
        if self.kind in ("choice", "grid"):
            return list(self.args)
        if self.kind == "randint":
            return [self.args[0], self.args[1] - 1]
        return list(self.args)


def parse_space(text: str) -> Space:
    """``key=loguniform(10,2000)`` -> Space (raises ConfigError naming the search)."""
    usage = (
        "expected key=space with space one of loguniform(a,b), uniform(a,b), randint(a,b), "
        "choice(v1,v2,...), grid(v1,v2,...)"
    )
    key, sep, spec = text.partition("=")
    match = _SPACE.match(spec)
    if not sep or not key.strip() or not match or match.group(1) not in SPACE_KINDS:
        raise ConfigError("--search", text, usage)
    kind, inner = match.group(1), match.group(2)
    try:
        args = yaml.safe_load(f"[{inner}]")
    except yaml.YAMLError:
        raise ConfigError("--search", text, "arguments are not valid values") from None
    key = key.strip()
    if kind in ("loguniform", "uniform", "randint"):
        numbers = all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
        if len(args) != 2 or not numbers or not args[0] < args[1]:
            raise ConfigError("--search", text, f"{kind} needs two numbers a < b")
        if kind == "loguniform" and args[0] <= 0:
            raise ConfigError("--search", text, "loguniform needs 0 < a < b")
        if kind == "randint" and not all(isinstance(a, int) for a in args):
            raise ConfigError("--search", text, "randint needs two integers a < b")
    elif not args:
        raise ConfigError("--search", text, f"{kind} needs at least one value")
    return Space(key=key, kind=kind, args=tuple(args))


def with_values(raw: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of the raw config dict with dotted keys set to ``values``."""
    return apply_overrides(
        copy.deepcopy(raw), [f"{key}={json.dumps(value)}" for key, value in values.items()]
    )


def validate_search(raw: dict[str, Any], spaces: list[Space]) -> None:
    """Every bounding value of every space must make a valid config (before Ray starts)."""
    keys = [s.key for s in spaces]
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ConfigError("--search", duplicates[0], "searched twice")
    for space in spaces:
        for value in space.extremes():
            config_from_dict(with_values(raw, {space.key: value}))


@dataclass
class SweepSettings:
    """What every trial needs besides its sampled values (pickled to the trials)."""

    out: str
    metric: str = "acc_weighted"
    mode: str = "max"
    trial_executor: str = "local"
    wandb_group: str | None = None
    report: bool = True
    forced: dict[str, Any] = field(default_factory=dict)  # dotted key -> value in every trial


def trial_executor_for(runtime: RuntimeConfig, requested: str) -> str:
    """``auto``: the Ray executor when trials ask for GPUs, else the local one."""
    if requested != "auto":
        return requested
    return "ray" if (runtime.gpus_per_worker or 0) > 0 else "local"


def trial_bundles(runtime: RuntimeConfig, trial_executor: str) -> list[dict[str, float]]:
    """Placement-group bundles of one trial (first bundle: the trial's own process)."""
    gpus = float(runtime.gpus_per_worker or 0.0)
    worker = {"CPU": float(runtime.cpus_per_worker)}
    if gpus > 0:
        worker["GPU"] = gpus
    if trial_executor == "local":
        return [worker]
    return [{"CPU": 1.0}] + [dict(worker) for _ in range(runtime.workers or 1)]


class TuneReportSink(Sink):
    """Reports every evaluated round's numeric summary (plus ``round``) to Ray Tune."""

    def __init__(self, metric: str) -> None:
        self.metric = metric

    def log_round(self, record: RoundRecord) -> None:
        from ray import tune

        if self.metric not in record.summary:
            return
        metrics = {
            k: v
            for k, v in record.summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        tune.report({**metrics, "round": record.round})


def trial_config(
    params: dict[str, Any], base: dict[str, Any], settings: SweepSettings
) -> ExperimentConfig:
    """The base config with a trial's sampled values, the forced runtime and the W&B group."""
    cfg = config_from_dict(with_values(base, {**params, **settings.forced}))
    if settings.wandb_group and cfg.tracking.wandb.enabled:
        cfg.tracking.wandb.group = cfg.tracking.wandb.group or settings.wandb_group
        cfg.tracking.wandb.tags = [*cfg.tracking.wandb.tags, "tune"]
    return cfg


def run_trial(params: dict[str, Any], base: dict[str, Any], settings: SweepSettings) -> None:
    """One Tune trial: the base config with the sampled ``params``, run to the end or stopped.

    When ASHA stops the trial, ``tune.report`` ends the thread (SystemExit) and the run
    folder's sinks are closed on the way out.
    """
    from ray import tune

    from fedsim.experiment import run_experiment

    logging.getLogger("lightning").setLevel(logging.ERROR)
    trial_id = tune.get_context().get_trial_id() or "trial"
    cfg = trial_config(params, base, settings)
    run_experiment(
        cfg,
        Path(settings.out) / "runs" / trial_id,
        progress=False,
        extra_sinks=[TuneReportSink(settings.metric)],
        report=settings.report,
    )


def evaluations(cfg: ExperimentConfig) -> int:
    """Number of evaluated rounds (= Tune reports of a complete trial)."""
    return sum(1 for r in range(cfg.rounds + 1) if r % cfg.eval_every == 0 or r == cfg.rounds)


@dataclass
class TrialRow:
    """One line of trials.csv."""

    trial: str
    params: dict[str, Any]
    status: str
    rounds: int
    best: float
    best_round: int
    final: float
    run_dir: str


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def collect_rows(results: Any, cfg: ExperimentConfig, settings: SweepSettings) -> list[TrialRow]:
    """Per trial: sampled values, completed/stopped/error, rounds trained, best and final."""
    rows = []
    sign = 1 if settings.mode == "max" else -1
    for result in results:
        frame = result.metrics_dataframe
        records = [] if frame is None else frame.to_dict("records")
        records = [r for r in records if _finite(r.get(settings.metric))]
        trial_id = (result.metrics or {}).get("trial_id") or Path(result.path).name
        if records:
            best = max(records, key=lambda r: (sign * r[settings.metric], -r["round"]))
            rounds = int(records[-1]["round"])
            best_value, best_round = float(best[settings.metric]), int(best["round"])
            final = float(records[-1][settings.metric])
        else:
            rounds, best_value, best_round, final = 0, math.nan, -1, math.nan
        if result.error is not None:
            status = "error"
        else:
            status = "completed" if rounds >= cfg.rounds else "stopped"
        rows.append(
            TrialRow(
                trial=str(trial_id),
                params=dict(result.config or {}),
                status=status,
                rounds=rounds,
                best=best_value,
                best_round=best_round,
                final=final,
                run_dir=str(Path(settings.out) / "runs" / str(trial_id)),
            )
        )
    rows.sort(key=lambda r: (not _finite(r.best), -sign * r.best if _finite(r.best) else 0))
    return rows


def write_trials_csv(path: Path, rows: list[TrialRow], keys: list[str], metric: str) -> Path:
    """trials.csv: trial, searched values, status, rounds, best/final metric, run folder."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["trial", *keys, "status", "rounds", f"best_{metric}", "best_round", f"final_{metric}",
             "run_dir"]
        )  # fmt: skip
        for r in rows:
            writer.writerow(
                [r.trial, *(r.params.get(k) for k in keys), r.status, r.rounds, r.best,
                 r.best_round, r.final, r.run_dir]
            )  # fmt: skip
    return path


def write_best_yaml(
    path: Path, base: dict[str, Any], best: TrialRow, metric: str, mode: str, trials: int
) -> Path:
    """The best trial's full resolved config, validated, ready for ``fedsim run``."""
    cfg = config_from_dict(with_values(base, best.params))
    header = (
        f"# fedsim tune: best of {trials} trials by {metric} ({mode}) = {best.best:.4f} "
        f"at round {best.best_round} (trial {best.trial})\n"
        f"# searched: {json.dumps(best.params)}\n"
        f"# run it: fedsim run {path}\n"
    )
    path.write_text(header + yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return path


def print_table(rows: list[TrialRow], keys: list[str], metric: str, title: str) -> None:
    """The trials as a rich table, best first."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("trial", *keys, "status", "rounds", f"best {metric}", f"final {metric}"):
        table.add_column(col, justify="right")

    def show(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    for r in rows:
        table.add_row(
            r.trial,
            *(show(r.params.get(k)) for k in keys),
            r.status,
            str(r.rounds),
            f"{r.best:.4f}",
            f"{r.final:.4f}",
        )
    Console().print(table)


@dataclass
class TuneOutcome:
    """What a search leaves: its rows (best first) and the files written."""

    rows: list[TrialRow]
    trials_csv: Path
    best_yaml: Path | None


@dataclass
class TuneOptions:
    """A search's options: the config file's ``tune:`` section, then the command line."""

    search: dict[str, str] = field(default_factory=dict)  # dotted key -> space
    samples: int = 8
    scheduler: str = "asha"  # asha | fifo
    metric: str = "acc_weighted"
    mode: str = "max"  # max | min
    grace_period: int = 1  # ASHA: evaluations before a trial can be stopped
    reduction_factor: float = 2.0  # ASHA: keep the best 1/reduction_factor at each rung
    max_concurrent: int | None = None


_OPTION_CHECKS: dict[str, tuple[Any, str]] = {
    "samples": (lambda v: v >= 1, "must be >= 1"),
    "scheduler": (lambda v: v in ("asha", "fifo"), "allowed: asha, fifo"),
    "metric": (lambda v: v in METRICS, f"allowed: {', '.join(METRICS)}"),
    "mode": (lambda v: v in ("max", "min"), "allowed: max, min"),
    "grace_period": (lambda v: v >= 1, "must be >= 1"),
    "reduction_factor": (lambda v: v > 1, "must be > 1"),
    "max_concurrent": (lambda v: v is None or v >= 1, "must be >= 1 (or null: no limit)"),
}


def tune_options(section: Any, cli: dict[str, Any], searches: list[str]) -> TuneOptions:
    """Merge the YAML ``tune:`` section and command-line values (CLI wins); validate."""
    from fedsim.config import build_dataclass

    section = dict(section or {})
    search = section.pop("search", None) or {}
    if not isinstance(search, dict):
        raise ConfigError("tune.search", search, "must map dotted keys to spaces")
    options = build_dataclass(TuneOptions, section, "tune.")
    for name, value in cli.items():
        if value is not None:
            setattr(options, name, value)
    for name, (ok, allowed) in _OPTION_CHECKS.items():
        value = getattr(options, name)
        if not ok(value):
            raise ConfigError(f"--{name.replace('_', '-')}", value, allowed)
    options.search = {str(k): str(v) for k, v in search.items()}
    for text in searches:
        key, _, space = text.partition("=")
        options.search[key.strip()] = space
    if not options.search:
        raise ConfigError(
            "--search", None, "give at least one, e.g. client.lr='loguniform(1e-3,0.1)'"
        )
    return options


def load_tune_config(
    config: str | Path, overrides: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(experiment raw dict with overrides applied, ``tune:`` section) of a YAML file."""
    raw = read_yaml_mapping(config)
    section = raw.pop("tune", None) or {}
    return apply_overrides(raw, overrides), section


def run_tune(
    config: str | Path,
    overrides: list[str],
    searches: list[str],
    *,
    samples: int | None = None,
    scheduler: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    out: str | Path | None = None,
    max_concurrent: int | None = None,
    trial_executor: str = "auto",
    address: str | None = None,
    grace_period: int | None = None,
    reduction_factor: float | None = None,
    report: bool = True,
    verbose: int = 1,
) -> TuneOutcome:
    """Validate everything, run the search on Ray, write trials.csv and best.yaml.

    Options left None come from the config's ``tune:`` section, else TuneOptions defaults.
    """
    if trial_executor not in ("auto", "local", "ray"):
        raise ConfigError("--trial-executor", trial_executor, "allowed: auto, local, ray")
    raw, section = load_tune_config(config, overrides)
    cli = {
        "samples": samples,
        "scheduler": scheduler,
        "metric": metric,
        "mode": mode,
        "grace_period": grace_period,
        "reduction_factor": reduction_factor,
        "max_concurrent": max_concurrent,
    }
    options = tune_options(section, cli, searches)
    cfg = config_from_dict(raw)
    base = cfg.to_dict()
    base["data"]["root"] = str(Path(base["data"]["root"]).resolve())  # trials run elsewhere
    spaces = [parse_space(f"{key}={space}") for key, space in options.search.items()]
    validate_search(base, spaces)
    metric, mode, scheduler = options.metric, options.mode, options.scheduler
    executor = trial_executor_for(cfg.runtime, trial_executor)
    forced: dict[str, Any] = {"runtime.executor": executor}
    if executor == "ray":
        forced["runtime.workers"] = cfg.runtime.workers or 1
        forced["runtime.address"] = None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = Path(out if out is not None else Path("runs") / f"{cfg.name}-tune-{stamp}").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = SweepSettings(
        out=str(out_dir),
        metric=metric,
        mode=mode,
        trial_executor=executor,
        wandb_group=(cfg.tracking.wandb.group or f"{cfg.name}-tune-{stamp}")
        if cfg.tracking.wandb.enabled
        else None,
        report=report,
        forced=forced,
    )
    bundles = trial_bundles(cfg.runtime, executor)

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from fedsim.runtime.ray_cluster import join_or_start_ray

    started = join_or_start_ray(address)
    try:
        total = ray.cluster_resources()
        for resource in ("CPU", "GPU"):
            need = sum(b.get(resource, 0.0) for b in bundles)
            if need > total.get(resource, 0.0) + 1e-9:
                raise ConfigError(
                    "runtime.cpus_per_worker" if resource == "CPU" else "runtime.gpus_per_worker",
                    bundles[-1].get(resource),
                    f"one trial needs {need:g} {resource}s, the cluster has "
                    f"{total.get(resource, 0.0):g}",
                )
        sched = (
            ASHAScheduler(
                time_attr="training_iteration",
                max_t=evaluations(cfg),
                grace_period=options.grace_period,
                reduction_factor=options.reduction_factor,
            )
            if scheduler == "asha"
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
                metric=metric,
                mode=mode,
                scheduler=sched,
                num_samples=options.samples,
                max_concurrent_trials=options.max_concurrent,
                reuse_actors=True,  # later trials skip the ~5 s torch import and data load
            ),
            run_config=tune.RunConfig(
                name="tune", storage_path=str(out_dir / "ray_results"), verbose=verbose
            ),
        )
        results = tuner.fit()
    finally:
        if started:
            ray.shutdown()
    keys = [s.key for s in spaces]
    rows = collect_rows(results, cfg, settings)
    trials_csv = write_trials_csv(out_dir / "trials.csv", rows, keys, metric)
    ok = [r for r in rows if _finite(r.best)]
    best_yaml = (
        write_best_yaml(out_dir / "best.yaml", base, ok[0], metric, mode, len(rows)) if ok else None
    )
    if verbose >= 0:
        print_table(rows, keys, metric, f"{cfg.name}: {len(rows)} trials ({scheduler})")
    return TuneOutcome(rows=rows, trials_csv=trials_csv, best_yaml=best_yaml)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``fedsim tune`` / ``python -m ray_jobs.tune`` options."""
    parser.add_argument("config", help="YAML experiment config")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rounds=20")
    parser.add_argument(
        "--search",
        action="append",
        nargs="+",
        default=[],
        metavar="KEY=SPACE",
        help="e.g. algorithm.wdr_lambda='loguniform(10,2000)' client.lr='choice(0.01,0.05)'",
    )
    parser.add_argument("--samples", type=int, default=None, help="trials (grid: repeats); 8")
    parser.add_argument("--scheduler", default=None, help="asha (stop bad trials early) | fifo")
    parser.add_argument("--metric", default=None, help=f"acc_weighted | {' | '.join(METRICS[1:])}")
    parser.add_argument("--mode", default=None, help="max (default) | min")
    parser.add_argument("--out", default=None, help="output folder (default runs/<name>-tune-T)")
    parser.add_argument("--max-concurrent", type=int, default=None, help="trials at once")
    parser.add_argument(
        "--trial-executor", default="auto", help="auto | local | ray (inside each trial)"
    )
    parser.add_argument("--address", default=None, help="Ray cluster (default RAY_ADDRESS)")
    parser.add_argument("--grace-period", type=int, default=None, help="ASHA: 1 evaluation")
    parser.add_argument("--reduction-factor", type=float, default=None, help="ASHA: keep 1/2")
    parser.add_argument("--no-report", action="store_true", help="no plots per trial")
    parser.add_argument("--quiet", action="store_true", help="no Tune progress output")


def run_from_args(args: argparse.Namespace) -> int:
    """Run a search from parsed arguments; 0 when a best config was written."""
    outcome = run_tune(
        args.config,
        args.overrides,
        [text for group in args.search for text in group],
        samples=args.samples,
        scheduler=args.scheduler,
        metric=args.metric,
        mode=args.mode,
        out=args.out,
        max_concurrent=args.max_concurrent,
        trial_executor=args.trial_executor,
        address=args.address,
        grace_period=args.grace_period,
        reduction_factor=args.reduction_factor,
        report=not args.no_report,
        verbose=0 if args.quiet else 1,
    )
    print(f"trials: {outcome.trials_csv}")
    if outcome.best_yaml is None:
        print("no trial reported the metric", file=sys.stderr)
        return 1
    print(f"best config: {outcome.best_yaml}  (fedsim run {outcome.best_yaml})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ray_jobs.tune`` = ``fedsim tune`` (for ``ray job submit``)."""
    from fedsim.cli import main as cli_main

    return cli_main(["tune", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
