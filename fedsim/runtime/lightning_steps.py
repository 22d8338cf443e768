"""What a LightningModule's hooks may be, honoured the way Lightning's Trainer does.

- ``configure_optimizers`` may return an optimizer, a list of them (more than one is refused:
  one local loop steps one optimizer), a tuple ``(optimizers, schedulers)``, or a dict with
  ``optimizer`` and ``lr_scheduler`` (a scheduler, or a dict with ``scheduler``, ``interval``
  ``step | epoch`` and ``frequency``); ``resolve_optimizers`` normalizes them, and
  ``step_schedulers`` steps each scheduler as the Trainer would inside a client's training;
- ``training_step`` / ``on_before_optimizer_step`` get the algorithm's client terms as the
  ``terms`` keyword only where they take one (an ``FLModule`` does; a plain module does
  not, and an algorithm that needs terms refuses it when the run is built);
- values a module logs with ``self.log(name, value)`` in ``training_step`` are collected
  per client (``LogCapture``: the mean over the client's steps).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from fedsim.errors import ConfigError


@dataclass
class ScheduleSpec:
    """One LR scheduler and when Lightning steps it."""

    scheduler: Any
    interval: str = "epoch"  # step | epoch
    frequency: int = 1


def _scheduler(item: Any, where: str) -> ScheduleSpec:
    if isinstance(item, dict):
        if "scheduler" not in item:
            raise ConfigError("model.name", where, "an lr_scheduler dict needs a 'scheduler'")
        spec = ScheduleSpec(
            item["scheduler"], item.get("interval", "epoch"), int(item.get("frequency", 1))
        )
    else:
        spec = ScheduleSpec(item)
    if spec.interval not in ("step", "epoch") or spec.frequency < 1:
        raise ConfigError(
            "model.name", where, f"lr_scheduler interval={spec.interval!r} frequency="
            f"{spec.frequency}: allowed interval step | epoch, frequency >= 1",
        )  # fmt: skip
    if isinstance(spec.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ConfigError(
            "model.name", where, "ReduceLROnPlateau needs a monitored metric, which a client's "
            "local training does not have; use a step or epoch scheduler",
        )  # fmt: skip
    return spec


def resolve_optimizers(module: Any) -> tuple[torch.optim.Optimizer, list[ScheduleSpec]]:
    """The one optimizer and the schedulers ``module.configure_optimizers()`` returns."""
    where = type(module).__name__
    out = module.configure_optimizers()
    schedulers: list[Any] = []
    if isinstance(out, dict):
        optimizers = out.get("optimizer")
        schedulers = [out["lr_scheduler"]] if out.get("lr_scheduler") is not None else []
    elif isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], (list, tuple)):
        optimizers, schedulers = out[0], list(out[1])
    else:
        optimizers = out
    if isinstance(optimizers, (list, tuple)):
        if len(optimizers) != 1:
            raise ConfigError(
                "model.name", where, f"configure_optimizers returns {len(optimizers)} optimizers; "
                "a client's local training steps one (manual optimization is not supported)",
            )  # fmt: skip
        optimizers = optimizers[0]
    if not isinstance(optimizers, torch.optim.Optimizer):
        raise ConfigError(
            "model.name", where, f"configure_optimizers returns {type(optimizers).__name__}, "
            "not an optimizer (an optimizer, [optimizer], ([optimizer], [schedulers]) or a dict "
            "with optimizer and lr_scheduler)",
        )  # fmt: skip
    return optimizers, [_scheduler(s, where) for s in schedulers]


def step_schedulers(schedules: list[ScheduleSpec], interval: str, count: int) -> None:
    """Step every scheduler of ``interval`` whose frequency divides ``count`` (steps or
    epochs done so far), after the optimizer step, as Lightning's Trainer does."""
    for spec in schedules:
        if spec.interval == interval and count % spec.frequency == 0:
            spec.scheduler.step()


@functools.cache
def takes_terms(cls: type, hook: str) -> bool:
    """Whether ``cls.<hook>`` accepts the ``terms`` keyword (an FLModule's hooks do)."""
    try:
        parameters = inspect.signature(getattr(cls, hook)).parameters
    except (TypeError, ValueError):
        return False
    return "terms" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


@dataclass
class LogCapture:
    """``self.log`` during a client's training: each name's values, averaged per client."""

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        self.sums[name] = self.sums.get(name, 0.0) + value
        self.counts[name] = self.counts.get(name, 0) + 1

    def log_dict(self, values: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        for name, value in values.items():
            self.log(name, value)

    def means(self) -> dict[str, float]:
        return {name: total / self.counts[name] for name, total in self.sums.items()}


def capture_logs(module: Any, capture: LogCapture | None) -> None:
    """Point ``module.log`` / ``log_dict`` at ``capture`` (None: back to Lightning's own)."""
    for name in ("log", "log_dict"):
        if capture is None:
            module.__dict__.pop(name, None)
        else:
            module.__dict__[name] = getattr(capture, name)
