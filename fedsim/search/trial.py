"""One Tune trial: a full ``run_experiment`` with the sampled values, reporting each evaluation.

Each trial reports its summary metrics after every evaluated round (``training_iteration`` =
evaluations so far), so ASHA can stop bad trials early.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsim.config import ExperimentConfig, config_from_dict
from fedsim.search.space import with_values
from fedsim.tracking.base import RoundRecord, Sink


@dataclass
class SweepSettings:
    """What every trial needs besides its sampled values (pickled to the trials)."""

    out: str
    metric: str = "acc_weighted"
    mode: str = "max"
    wandb_group: str | None = None
    report: bool = True
    forced: dict[str, Any] = field(default_factory=dict)  # dotted key -> value in every trial


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
