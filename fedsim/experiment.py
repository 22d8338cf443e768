"""Run one experiment end to end: validate, build, make the run folder, run, write results."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from fedsim.checkpoint import (
    Checkpoint,
    check_resumable,
    checkpoint_dir,
    latest_checkpoint,
    load_checkpoint,
)
from fedsim.config import ExperimentConfig
from fedsim.errors import ConfigError
from fedsim.runtime.factory import make_executor
from fedsim.simulation import RunResult, Simulation
from fedsim.tracking.base import Sink
from fedsim.tracking.files import FileSink
from fedsim.tracking.plots import write_run_plots
from fedsim.tracking.progress import ProgressSink


def default_run_dir(cfg: ExperimentConfig, runs_root: str | Path = "runs") -> Path:
    """``runs/<name>``, or ``runs/<name>-2``, ``-3``... when that exists (never overwrite)."""
    base = Path(runs_root) / cfg.name
    candidate, suffix = base, 2
    while candidate.exists():
        candidate = base.with_name(f"{base.name}-{suffix}")
        suffix += 1
    return candidate


def write_report_safely(run_dir: Path) -> list[Path]:
    """The report plots; a plotting error is printed, never raised (the results are saved)."""
    from fedsim.tracking.report import write_report

    try:
        return write_report(run_dir)
    except Exception as err:  # noqa: BLE001 - plots must not fail a finished run
        print(f"fedsim: report plots failed: {err.__class__.__name__}: {err}", file=sys.stderr)
        return []


def resumable_checkpoint(cfg: ExperimentConfig, run_dir: Path) -> Checkpoint:
    """The newest checkpoint in ``run_dir``, checked against ``cfg`` (raises ConfigError)."""
    path = latest_checkpoint(run_dir)
    if path is None:
        raise ConfigError(
            "--resume",
            str(run_dir),
            f"no checkpoint in {checkpoint_dir(run_dir)} (a run saves them when "
            "checkpoint_every > 0)",
        )
    checkpoint = load_checkpoint(path)
    check_resumable(checkpoint, cfg.to_dict(), path)
    return checkpoint


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    extra_sinks: list[Sink] | None = None,
    report: bool = True,
    resume: bool = False,
) -> RunResult:
    """Everything that can fail on bad input fails before the run folder exists.

    ``report``: draw the ``fedsim report`` plots into ``<run_dir>/plots/`` at the end (before
    the sinks close, so the W&B sink can upload them). ``resume``: continue the run in
    ``out_dir`` (default ``runs/<name>``) from its newest checkpoint.
    """
    simulation = Simulation(cfg)
    if resume:
        run_dir = Path(out_dir) if out_dir is not None else Path("runs") / cfg.name
        checkpoint = resumable_checkpoint(cfg, run_dir)
    else:
        run_dir = Path(out_dir) if out_dir is not None else default_run_dir(cfg)
        checkpoint = None
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    sinks: list[Sink] = [FileSink(), *(extra_sinks or [])]
    if cfg.tracking.wandb.enabled:
        from fedsim.tracking.wandb_sink import WandbSink

        sinks.append(WandbSink(cfg.tracking.wandb))
    if progress:
        sinks.append(ProgressSink(cfg.rounds, description=cfg.name))
    try:
        executor = make_executor(cfg.runtime, simulation.worker_spec, simulation.data)
    except Exception:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    try:
        for sink in sinks:
            sink.start(run_dir, cfg.to_dict(), simulation.data.partition_summary())
        result = simulation.run(executor, sinks, run_dir=run_dir, resume=checkpoint)
        write_run_plots(run_dir, simulation, result)
        if report:
            write_report_safely(run_dir)
    finally:
        for sink in sinks:
            sink.close()
        executor.close()
    result.run_dir = run_dir
    return result


def redraw_algorithm_plots(run_dir: str | Path) -> list[Path]:
    """The end-of-run figures (cwFedAvg's row norms) again, from the run's final checkpoint.

    Needs a checkpoint of every round (``checkpoint_every`` > 0 and the run finished) and the
    run's dataset; returns [] when there is none or the algorithm draws no such figure.
    """
    from fedsim.config import load_config
    from fedsim.runtime.state_store import ClientStateStore

    run_dir = Path(run_dir)
    path = latest_checkpoint(run_dir)
    if path is None:
        return []
    checkpoint = load_checkpoint(path)
    cfg = load_config(run_dir / "config.yaml", [])
    if checkpoint.rounds_trained != cfg.rounds:
        return []
    simulation = Simulation(cfg)
    store = ClientStateStore()
    for client, state in checkpoint.client_states.items():
        store.put(client, state)
    history = [{"round": r.round, **r.summary} for r in checkpoint.records]
    result = RunResult(summary={}, history=history, state=checkpoint.state, client_store=store)
    try:
        return write_run_plots(run_dir, simulation, result)
    finally:
        store.close()
