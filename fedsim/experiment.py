"""Run one experiment end to end: validate, build, make the run folder, run, write results."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsim.algorithms.base import Algorithm, ClientStates, ServerState
from fedsim.checkpoint import Checkpoint, checkpoint_dir, newest_readable_checkpoint
from fedsim.checkpoint_digest import digest_path
from fedsim.checkpoint_resume import check_resumable
from fedsim.config import ExperimentConfig
from fedsim.data.hf import accept as accept_hf_data
from fedsim.errors import ClientFailureError, ConfigError, RunFailure
from fedsim.interrupts import Interruption
from fedsim.rounds.result import RunResult
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
from fedsim.tracking.plots import figure_context, write_figures
from fedsim.tracking.progress import ProgressSink

if TYPE_CHECKING:
    from fedsim.runtime.pool_start import StartedPool


def write_report_safely(run_dir: Path) -> list[Path]:
    """The report plots; a plotting error is printed, never raised (the results are saved)."""
    from fedsim.tracking.report import write_report

    try:
        return write_report(run_dir)
    except Exception as err:  # noqa: BLE001 - plots must not fail a finished run
        print(f"fedsim: report plots failed: {err.__class__.__name__}: {err}", file=sys.stderr)
        return []


def resumable_checkpoint(
    cfg: ExperimentConfig, run_dir: Path, may_change: tuple[str, ...] = ()
) -> Checkpoint:
    """The newest readable checkpoint in ``run_dir``, checked against ``cfg`` (raises ConfigError).

    Damaged newer ones are renamed aside (``round_00004.pt.damaged``) with a one-line
    warning saying which rounds run again; none readable is a ConfigError. ``may_change``:
    dotted keys the config may change besides those any resume may (``check_resumable``).
    """
    config = cfg.to_dict()
    checkpoint, path, damaged = newest_readable_checkpoint(run_dir, config)
    if not damaged and checkpoint is None:
        raise ConfigError(
            "--resume",
            str(run_dir),
            f"no checkpoint in {checkpoint_dir(run_dir)} (a run saves them when "
            "checkpoint_every > 0): run it again with --overwrite, or pick a new folder",
        )
    if checkpoint is None or path is None:
        reasons = "; ".join(f"{err.path.name}: {err.reason}" for err in damaged)
        raise ConfigError("--resume", str(run_dir), f"no readable checkpoint ({reasons})")
    check_resumable(checkpoint, config, path, may_change)
    if damaged:  # kept aside for inspection, and said which rounds run again
        newest = max(int(err.path.stem.split("_")[-1]) for err in damaged)
        first, last = checkpoint.rounds_trained, newest - 1
        again = f"round {first} is" if first == last else f"rounds {first}-{last} are"
        again += " computed again"
        for err in damaged:
            aside = err.path.with_name(err.path.name + ".damaged")
            err.path.replace(aside)
            digest = digest_path(err.path)
            if digest.is_file():
                digest.replace(digest.with_name(digest.name + ".damaged"))
            print(
                f"fedsim: warning: {err.path.parent.name}/{err.path.name} is damaged "
                f"({err.reason}), kept as {aside.name}; resuming from {path.name}: {again}",
                file=sys.stderr,
            )
    return checkpoint


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
    from fedsim.data.datasets import dataset_present

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


def write_algorithm_figures(
    run_dir: str | Path,
    algorithm: Algorithm,
    state: ServerState,
    client_states: ClientStates,
    config: dict[str, Any],
) -> list[Path]:
    """The algorithm's own figures of its final ``state`` into ``run_dir/plots/``.

    ``config`` is the run's (resolved) config dict: the figures show round ``rounds``. An
    error is printed, never raised: the run's results are already saved.
    """
    rounds = config["rounds"]
    try:
        figures = algorithm.figures(state, client_states, rounds)
    except Exception as err:  # noqa: BLE001 - plots must not fail a finished run
        print(f"fedsim: algorithm figures failed: {err.__class__.__name__}: {err}", file=sys.stderr)
        return []
    context = figure_context(config["name"], config["algorithm"]["name"], rounds)
    return write_figures(Path(run_dir) / "plots", figures, context)


def redraw_algorithm_plots(run_dir: str | Path) -> list[Path]:
    """The algorithm's end-of-run figures (cwFedAvg's row norms) again, from the final checkpoint.

    Needs only the checkpoint (it holds the algorithm, the server state and every client's
    state): no dataset, no simulation. Returns [] when there is no readable checkpoint (a
    damaged or refused one is a one-line warning), when the newest readable one is not the
    run's last (``checkpoint_every`` > 0 and the run finished), or when it predates
    checkpoints that hold the algorithm. The checkpoint may reference the modules of the
    algorithm and model that ``run_dir/config.yaml`` names by import path.
    """
    import yaml

    try:
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        config = None
    try:
        checkpoint, _, damaged = newest_readable_checkpoint(run_dir, config)
    except ConfigError as err:  # it names code fedsim does not load
        print(f"fedsim: warning: {err.allowed} ({err.value}); figures not redrawn", file=sys.stderr)
        return []
    if damaged:  # an older checkpoint does not hold the final state: nothing to redraw
        reasons = "; ".join(f"{err.path} is damaged ({err.reason})" for err in damaged)
        print(f"fedsim: warning: {reasons}; figures not redrawn", file=sys.stderr)
        return []
    if checkpoint is None:
        return []
    if checkpoint.algorithm is None or checkpoint.rounds_trained != checkpoint.config["rounds"]:
        return []
    return write_algorithm_figures(
        run_dir, checkpoint.algorithm, checkpoint.state, checkpoint.client_states, checkpoint.config
    )
