"""Run one experiment end to end: validate, build, make the run folder, run, write results.

The checkpoint a run resumes from is found by ``fedsim/checkpoint_resume.py``; the plots
at a run's end (and again from its final checkpoint) are drawn by ``fedsim/run_figures.py``.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fedsim.checkpoint import Checkpoint
from fedsim.checkpoint_resume import resumable_checkpoint
from fedsim.config import ExperimentConfig
from fedsim.data.hf import accept as accept_hf_data
from fedsim.errors import ClientFailureError, ConfigError, RunFailure
from fedsim.interrupts import Interruption
from fedsim.rounds.result import RunResult
from fedsim.run_figures import (
    redraw_algorithm_plots,
    write_algorithm_figures,
    write_report_safely,
)
from fedsim.run_folder import (
    check_out_dir,
    check_same_data,
    default_run_dir,
    make_run_dir,
    run_failed,
)
from fedsim.runtime.executor_choice import ExecutorChoice, RunWork, choose_executor
from fedsim.runtime.factory import check_runtime, make_executor
from fedsim.simulation import Simulation
from fedsim.startup_timeline import write_startup
from fedsim.tracking.base import Sink
from fedsim.tracking.files import FileSink
from fedsim.tracking.progress import ProgressSink

if TYPE_CHECKING:
    from fedsim.runtime.pool_start import StartedPool


class RunInterrupted(Exception):
    """Ctrl-C, SIGTERM or a sink stopped a run; ``checkpoint`` is where it can resume from
    (None: nowhere); ``signal``: SIGINT, SIGTERM or ``stopped`` (a sink's ``Stopped``)."""

    def __init__(
        self, run_dir: Path, rounds_done: int, checkpoint: Path | None, signal: str = "SIGINT"
    ) -> None:
        super().__init__(f"interrupted after {rounds_done} rounds")
        self.run_dir, self.rounds_done, self.checkpoint = run_dir, rounds_done, checkpoint
        self.signal = signal

    @property
    def exit_code(self) -> int:
        """The shell's code for death by this signal: 130 (SIGINT), 143 (SIGTERM)."""
        return 143 if self.signal == "SIGTERM" else 130

    def describe(self, resume_command: str) -> str:
        """One line: where the run stopped and how to continue it."""
        how = {"SIGTERM": "terminated (SIGTERM)", "stopped": "stopped"}.get(
            self.signal, "interrupted"
        )
        done = f"{how} in {self.run_dir} after {self.rounds_done} completed rounds"
        if self.checkpoint is None:
            return f"{done}; no checkpoint (checkpoint_every=0), so it cannot be resumed"
        return f"{done}; resume with: {resume_command}"


def check_experiment(cfg: ExperimentConfig) -> str:
    """Validate ``cfg`` as a run would, without a run folder, Ray, training or a download; a
    summary line.

    Builds the federation (dataset, partition, splits), the model and the algorithm, and
    checks the runtime settings this machine can check (a CUDA device that is not there).
    """
    from fedsim.data.dataset_files import dataset_present

    d = cfg.data
    if d.download and not dataset_present(d.name, d.root):  # --check downloads nothing
        choice = choose_executor(cfg.runtime, None)
        check_runtime(choice.runtime(cfg.runtime))
        return (
            f"config OK (keys and values): {cfg.algorithm.name} on {d.name}, {cfg.rounds} "
            f"rounds, executor {choice.executor}; {d.name} is not under data.root="
            f"{d.root}, so the partition, model and algorithm are checked when a run downloads it"
        )
    simulation = Simulation(cfg)
    choice = choose_executor(cfg.runtime, RunWork.of(simulation))
    check_runtime(choice.runtime(cfg.runtime))
    data = simulation.data
    held = f" + {len(data.newcomers)} held out" if data.newcomers else ""
    return (
        f"config OK: {cfg.algorithm.name} on {cfg.data.name}, {data.num_clients} clients{held} "
        f"({int(data.train_sizes().sum())} train / {int(data.test_sizes().sum())} test samples), "
        f"{cfg.model.name} with {simulation.initial_params.numel():,} parameters, "
        f"{cfg.rounds} rounds, executor {choice.executor}"
        + (f" ({choice.reason})" if choice.auto else "")
    )


def prepare_run(
    cfg: ExperimentConfig,
    out_dir: str | Path | None,
    extra_sinks: list[Sink] | None,
    simulation: Simulation | None = None,
    *,
    progress: bool,
    resume: bool,
    overwrite: bool,
    resume_changes: tuple[str, ...] = (),
    choice: ExecutorChoice | None = None,
) -> tuple[Simulation, Path, Checkpoint | None, list[Sink]]:
    """The simulation (built here unless given), the run folder (checked, not made), the
    checkpoint to resume, the sinks (the extra ones after the run's own: a sink that stops
    the run sees a round only once every other sink has it)."""
    simulation = Simulation(cfg) if simulation is None else simulation
    choice = choice or choose_executor(cfg.runtime, RunWork.of(simulation))
    check_runtime(choice.runtime(cfg.runtime))
    if resume:
        run_dir = Path(out_dir) if out_dir is not None else Path("runs") / cfg.name
        check_out_dir(run_dir, resume=True, overwrite=False)
        checkpoint = resumable_checkpoint(cfg, run_dir, resume_changes)
        check_same_data(run_dir, simulation.partition_info())  # an hf: file changed under it
    else:
        run_dir = Path(out_dir) if out_dir is not None else default_run_dir(cfg)
        check_out_dir(run_dir, resume=False, overwrite=overwrite)
        checkpoint = None
    sinks: list[Sink] = [FileSink()]
    if cfg.tracking.wandb.enabled:
        from fedsim.tracking.wandb_sink import WandbSink

        sinks.append(WandbSink(cfg.tracking.wandb))
    if progress:
        sinks.append(ProgressSink(cfg.rounds, description=cfg.name))
    return simulation, run_dir, checkpoint, [*sinks, *(extra_sinks or [])]


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: str | Path | None = None,
    *,
    progress: bool = True,
    extra_sinks: list[Sink] | None = None,
    report: bool = True,
    resume: bool = False,
    overwrite: bool = False,
    simulation: Simulation | None = None,
    pool: StartedPool | None = None,
    resume_changes: tuple[str, ...] = (),
    executor_choice: ExecutorChoice | None = None,
) -> RunResult:
    """Run the experiment ``cfg`` into ``out_dir`` (default ``runs/<name>``) and return its
    ``RunResult`` (``summary``, ``history``, ``run_dir``, the final server ``state``).

    Everything that can fail on bad input fails before the run folder exists (a
    ``fedsim.errors.ConfigError`` naming the key). ``progress``: draw the progress bar.
    ``report``: draw the ``fedsim report`` plots into ``<run_dir>/plots/`` at the end (before
    the sinks close, so the W&B sink can upload them). ``resume``: continue the run in
    ``out_dir`` (default ``runs/<name>``) from its newest checkpoint. ``overwrite``: replace
    the run in ``out_dir`` (an existing run folder is otherwise refused). Ctrl-C raises
    ``RunInterrupted`` after checkpointing the last completed round (with checkpoints on).
    ``simulation`` (built from ``cfg``) and ``pool`` (Ray and the worker actors): started
    ahead by ``fedsim.early_start``; the run owns the pool from then on. ``executor_choice``:
    the executor ``runtime.executor=auto`` chose (None: chosen here, and said on stderr).
    ``resume_changes``:
    dotted keys a resume may change besides name, rounds, runtime... (a Population Based
    Training exploit: the searched keys). An extra sink may stop the run by raising
    ``fedsim.interrupts.Stopped`` (``RunInterrupted`` with signal ``stopped``). A run that
    raises mid-way is ``RunFailed`` (one line; its summary.json says ``failed``).
    """
    try:
        simulation = Simulation(cfg) if simulation is None else simulation
        choice = executor_choice or choose_executor(cfg.runtime, RunWork.of(simulation))
        simulation, run_dir, checkpoint, sinks = prepare_run(
            cfg, out_dir, extra_sinks, simulation, progress=progress, resume=resume,
            overwrite=overwrite, resume_changes=resume_changes, choice=choice,
        )  # fmt: skip
        if choice.auto and pool is None:  # (with a pool, start_early said it)
            print(choice.line(), file=sys.stderr)
        prepared_at = time.time()
        runtime = choice.runtime(cfg.runtime)
        executor = make_executor(runtime, simulation.worker_spec, simulation.data, pool=pool)
    except BaseException:
        if pool is not None:
            pool.close()  # an executor closes it itself
        raise
    started = False
    created: Path | None = None
    try:
        created = make_run_dir(run_dir, overwrite=overwrite)
        # an hf: dataset's conversion (tokens too) is cached once a run is accepted
        accept_hf_data(cfg.data, cfg.model)
        for sink in sinks:
            partition = simulation.partition_info()
            sink.start(run_dir, cfg.to_dict(), partition)
        started = True
        try:
            result = simulation.run(executor, sinks, run_dir=run_dir, resume=checkpoint)
        except ClientFailureError as err:
            raise ClientFailureError(
                f"{err}; {run_dir} is kept: its metrics.jsonl and clients.csv show the rounds "
                "up to the divergence"
            ) from None
        except KeyboardInterrupt:
            stopped = simulation.interrupted or Interruption(0, None)
            raise RunInterrupted(
                run_dir, stopped.rounds_done, stopped.checkpoint, stopped.signal
            ) from None
        except (ConfigError, RunFailure):
            raise  # one line already
        except Exception as err:
            raise run_failed(err, run_dir) from err
        write_startup(run_dir, executor, driver_ready=prepared_at)
        write_algorithm_figures(
            run_dir, simulation.algorithm, result.state, result.client_store, cfg.to_dict()
        )
        simulation.write_adapters(run_dir, result)  # a LoRA run's adapters as peft folders
        if report:
            write_report_safely(run_dir)
    except BaseException:
        if not started and created is not None:  # nothing of the run was written yet
            shutil.rmtree(created, ignore_errors=True)
        raise
    finally:
        for sink in sinks:
            sink.close()
        executor.close()
    result.run_dir = run_dir
    return result


__all__ = [
    "RunInterrupted", "check_experiment", "prepare_run", "redraw_algorithm_plots",
    "resumable_checkpoint", "run_experiment", "write_algorithm_figures", "write_report_safely",
]  # fmt: skip
