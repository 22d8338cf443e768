"""One Tune trial: a full ``run_experiment`` with the sampled values, reporting each evaluation.

Each trial reports its summary metrics after every evaluated round (``training_iteration`` =
evaluations so far), so ASHA can stop bad trials early. A report carries the trial's own
fedsim checkpoint of that round (``checkpoints/round_N.pt`` and its ``.sha256``: the model
the evaluation measured; trials checkpoint at every evaluation), so Tune can restore a trial:
``fedsim tune --resume`` continues an interrupted search, and Population Based Training
restarts a trial from a better trial's checkpoint with mutated values.

``tune.report`` does not return when Tune ends the trial there (ASHA at its last rung or
``max_t``, a PBT pause): Tune raises SystemExit in the trial's thread. So the last evaluation
is reported only after ``run_experiment`` has returned (summary.json, plots/, figures all
written), and an earlier stop becomes ``Stopped``: the run ends as after Ctrl-C, with
``status: stopped`` in its summary.json, its W&B run finished and its report plots drawn.
Every report carries ``rounds_completed``: the round reported is committed whole, so a trial
stopped at round r's report has completed r + 1 rounds, as its summary.json and trials.csv
say (Tune's ``training_iteration`` counts reports, i.e. evaluations, not rounds).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsim.checkpoint import checkpoint_dir
from fedsim.checkpoint_digest import digest_path
from fedsim.config import ExperimentConfig, config_from_dict
from fedsim.interrupts import Stopped
from fedsim.search.space import with_values
from fedsim.tracking.base import RoundRecord, Sink

TUNE_INFO = "tune.json"  # in a Tune checkpoint: the round it was reported with, the trial
RESTORES = "restores.jsonl"  # in a run folder: every restore from a Tune checkpoint
# How long Tune waits for a stopped trial's thread before its actor takes the next trial
# (Ray's default, 2 s, is shorter than closing a run: summary, W&B).
THREAD_TIMEOUT_S = "120"


@dataclass
class SweepSettings:
    """What every trial needs besides its sampled values (pickled to the trials)."""

    out: str
    metric: str = "acc_weighted"
    mode: str = "max"
    wandb_group: str | None = None
    report: bool = True
    forced: dict[str, Any] = field(default_factory=dict)  # dotted key -> value in every trial
    # dotted keys a restored trial may change (PBT: the searched keys; else none)
    may_change: tuple[str, ...] = ()


def wandb_params(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's sampled values as top-level W&B config keys (``client.lr`` -> ``client_lr``;
    W&B shows nested config with dots). Top-level config keys (``seed``) are there already."""
    return {key.replace(".", "_"): value for key, value in params.items() if "." in key}


def trial_config(
    params: dict[str, Any], base: dict[str, Any], settings: SweepSettings
) -> ExperimentConfig:
    """The base config with a trial's sampled values, the forced runtime, the W&B group and
    the sampled values as W&B config."""
    cfg = config_from_dict(with_values(base, {**params, **settings.forced}))
    if cfg.tracking.wandb.enabled:
        wandb = cfg.tracking.wandb
        wandb.group = wandb.group or settings.wandb_group
        wandb.tags = [*wandb.tags, "tune"]
        wandb.params = {**wandb.params, **wandb_params(params)}
    return cfg


class TuneReportSink(Sink):
    """Reports every evaluated round's numeric summary (plus ``round``) to Ray Tune, with the
    run's checkpoint of that round; the last round only once the run has ended (``final``).

    ``reported``: the round the trial's restored checkpoint was reported with (-1: none);
    the rounds up to it were reported before the restore and are not reported again.
    """

    def __init__(self, metric: str, run_dir: Path, rounds: int, reported: int = -1) -> None:
        self.metric, self.run_dir, self.rounds, self.reported = metric, run_dir, rounds, reported
        self.final: tuple[dict[str, Any], int] | None = None

    def log_round(self, record: RoundRecord) -> None:
        if record.round <= self.reported or self.metric not in record.summary:
            return
        metrics = {
            k: v
            for k, v in record.summary.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        metrics["round"] = record.round
        # the round reported is committed whole, even when Tune stops the trial here
        metrics["rounds_completed"] = min(record.round + 1, self.rounds)
        if record.round >= self.rounds:  # after summary.json and the plots (report_final)
            self.final = (metrics, record.round)
            return
        try:
            self.report(metrics, record.round)
        except SystemExit:  # Tune ended the trial inside tune.report
            raise Stopped from None

    def report_final(self) -> None:
        """The last evaluation, once the run folder is complete; ``done``: the trial ends."""
        if self.final is not None:
            metrics, round_idx = self.final
            self.report({**metrics, "done": True}, round_idx)

    def report(self, metrics: dict[str, Any], round_idx: int) -> None:
        """``tune.report`` with ``checkpoints/round_<round_idx>.pt`` (+ its digest) when the
        run has it: the state the evaluation of ``round_idx`` measured."""
        from ray import tune

        path = checkpoint_dir(self.run_dir) / f"round_{round_idx:05d}.pt"
        if round_idx == 0 or not path.is_file():
            tune.report(metrics)
            return
        # staged beside the run folder (hard links: no copy), removed when the report returns
        stage = self.run_dir.parent.parent / ".staging" / self.run_dir.name
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir(parents=True)
        try:
            for source in (path, digest_path(path)):
                _link_or_copy(source, stage / source.name)
            info = {"round": round_idx, "trial": self.run_dir.name}
            (stage / TUNE_INFO).write_text(json.dumps(info))
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(stage)))
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or no hard links there
        shutil.copy2(source, target)


def restore_checkpoint(
    checkpoint: Any, run_dir: Path, params: dict[str, Any]
) -> dict[str, Any] | None:
    """Put a Tune checkpoint's fedsim checkpoint into ``run_dir/checkpoints`` (the only one
    there, so the run resumes from it); its ``tune.json`` (round reported, trial). None: none.

    It may be another trial's (a PBT exploit): the run folder then continues that trial's run
    with this trial's ``params``; ``restores.jsonl`` in the run folder keeps a line per restore
    (the round, the trial it came from, the values the run continued with).
    """
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        folder = Path(folder)
        info = json.loads((folder / TUNE_INFO).read_text())
        saved = folder / f"round_{info['round']:05d}.pt"
        target = checkpoint_dir(run_dir)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for source in (saved, digest_path(saved)):
            shutil.copy2(source, target / source.name)
    line = {"round": info["round"], "from_trial": info["trial"], "values": params}
    with open(run_dir / RESTORES, "a") as handle:
        handle.write(json.dumps(line) + "\n")
    return info


def run_trial(params: dict[str, Any], base: dict[str, Any], settings: SweepSettings) -> None:
    """One Tune trial: the base config with the sampled ``params``, run to the end or stopped;
    continued from Tune's checkpoint when Tune restores it (``fedsim tune --resume``, PBT)."""
    from ray import tune

    os.environ.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", THREAD_TIMEOUT_S)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)  # per report
    trial_id = tune.get_context().get_trial_id() or "trial"
    run_dir = Path(settings.out) / "runs" / trial_id
    cfg = trial_config(params, base, settings)
    restored = restore_checkpoint(tune.get_checkpoint(), run_dir, params)
    reported = restored["round"] if restored else -1
    sink = TuneReportSink(settings.metric, run_dir, cfg.rounds, reported)
    run_reporting(cfg, run_dir, sink, settings, restored=restored is not None)


def run_reporting(
    cfg: ExperimentConfig,
    run_dir: Path,
    sink: TuneReportSink,
    settings: SweepSettings,
    *,
    restored: bool,
) -> None:
    """The trial's run, reporting to Tune through ``sink``. Stopped by Tune, it ends as after
    Ctrl-C and draws its report plots from the rounds it ran (a complete folder, as a
    finished trial's), then ends the trial's thread (SystemExit); run to the end, its last
    evaluation is reported once the folder is complete."""
    from fedsim.experiment import RunInterrupted, run_experiment
    from fedsim.run_figures import write_report_safely

    try:
        run_experiment(
            cfg,
            run_dir,
            progress=False,
            extra_sinks=[sink],
            report=settings.report,
            resume=restored,
            overwrite=not restored,  # started again from scratch: its old folder goes
            resume_changes=settings.may_change,
        )
    except RunInterrupted as stop:
        if stop.signal == "stopped":  # Tune's SystemExit, once the run folder is closed
            if settings.report:
                write_report_safely(run_dir)
            raise SystemExit(0) from None
        raise
    sink.report_final()


def evaluations(cfg: ExperimentConfig) -> int:
    """Number of evaluated rounds (= Tune reports of a complete trial)."""
    return sum(1 for r in range(cfg.rounds + 1) if r % cfg.eval_every == 0 or r == cfg.rounds)
