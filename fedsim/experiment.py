"""Run one experiment end to end: validate, build, make the run folder, run, write results."""

from __future__ import annotations

import shutil
from pathlib import Path

from fedsim.config import ExperimentConfig
from fedsim.runtime.factory import make_executor
from fedsim.simulation import RunResult, Simulation
from fedsim.tracking.base import Sink
from fedsim.tracking.files import FileSink
from fedsim.tracking.progress import ProgressSink


def default_run_dir(cfg: ExperimentConfig, runs_root: str | Path = "runs") -> Path:
    """``runs/<name>``, or ``runs/<name>-2``, ``-3``... when that exists (never overwrite)."""
    base = Path(runs_root) / cfg.name
    candidate, suffix = base, 2
    while candidate.exists():
        candidate = base.with_name(f"{base.name}-{suffix}")
        suffix += 1
    return candidate


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    extra_sinks: list[Sink] | None = None,
) -> RunResult:
    """Everything that can fail on bad input fails before the run folder exists."""
    simulation = Simulation(cfg)
    run_dir = Path(out_dir) if out_dir is not None else default_run_dir(cfg)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    sinks: list[Sink] = [FileSink(), *(extra_sinks or [])]
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
        result = simulation.run(executor, sinks)
    finally:
        for sink in sinks:
            sink.close()
        executor.close()
    result.run_dir = run_dir
    return result
