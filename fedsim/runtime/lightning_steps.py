"""What a LightningModule's hooks may be, honoured the way Lightning's Trainer does.

- ``configure_optimizers`` may return an optimizer, a list of them (more than one is refused:
  one local loop steps one optimizer), a tuple ``(optimizers, schedulers)``, or a dict with
  ``optimizer`` and ``lr_scheduler`` (a scheduler, or a dict with ``scheduler``, ``interval``
  ``step | epoch`` and ``frequency``); ``resolve_optimizers`` normalizes them, and
  ``step_schedulers`` steps each scheduler as the Trainer would inside a client's training;
- ``training_step(batch, batch_idx)`` is called as it is (a loss tensor, a dict with
  ``loss``, or None to skip the batch, as Lightning allows); the algorithm's client terms
  are fedsim's work around it (``training.py``), never the module's;
- the Lightning hooks in ``TRAINING_HOOKS`` are called where the Trainer calls them, when
  the module's class defines them (``defines_hook``);
- values a module logs with ``self.log`` / ``self.log_dict`` are collected per client
  (``LogCapture``): numbers and tensors reduced over the client's steps with ``reduce_fx``
  (mean by default), a torchmetrics ``Metric`` computed over the client's training and reset.
"""

from __future__ import annotations

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


# the hooks of a LightningModule that a client's local training calls, where its class
# defines them (docs: "Your own LightningModule"); validation/test hooks are not called
TRAINING_HOOKS = (
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_train_end",
)


def defines_hook(cls: type, hook: str) -> bool:
    """Whether ``cls`` overrides Lightning's no-op ``hook`` (so calling it does something)."""
    import pytorch_lightning as pl

    return getattr(cls, hook, None) is not getattr(pl.LightningModule, hook, None)


def defined_hooks(module: Any) -> frozenset[str]:
    """The training hooks ``module``'s class defines (see ``TRAINING_HOOKS``)."""
    return frozenset(h for h in TRAINING_HOOKS if defines_hook(type(module), h))


def step_loss(output: Any, where: str) -> torch.Tensor | None:
    """The loss of one ``training_step`` return value: a tensor, ``{"loss": tensor, ...}``,
    or None (skip this batch, as Lightning does)."""
    if output is None or isinstance(output, torch.Tensor):
        return output
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    raise ConfigError(
        "model.name", where, f"training_step returns {type(output).__name__}; Lightning allows "
        "a loss tensor, a dict with a 'loss' tensor, or None (skip the batch)",
    )  # fmt: skip


_REDUCERS = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}


def _reducer(reduce_fx: Any) -> str:
    """``self.log``'s ``reduce_fx`` (a name or torch.mean / sum / max / min) as a name."""
    name = reduce_fx if isinstance(reduce_fx, str) else getattr(reduce_fx, "__name__", "")
    if name not in _REDUCERS:
        raise ConfigError(
            "model.name", f"reduce_fx={reduce_fx!r}", "self.log's reduce_fx in a client's "
            "training: mean, sum, max or min (or torch.mean / sum / max / min)",
        )  # fmt: skip
    return _REDUCERS[name]


def is_metric(value: Any) -> bool:
    """A torchmetrics ``Metric`` (or anything shaped like one: update, compute, reset)."""
    return all(callable(getattr(value, a, None)) for a in ("update", "compute", "reset")) and (
        not isinstance(value, (torch.Tensor, dict))
    )


@dataclass
class LogCapture:
    """``self.log`` during one client's training: one value per name for the client.

    Numbers and tensors are reduced over the client's steps (every local epoch) with
    ``reduce_fx``; a ``Metric`` is computed once at the end of the client's training and
    reset, so it never carries one client's state into the next. ``on_step`` / ``on_epoch``
    and Lightning's other logging options are accepted and change nothing: fedsim keeps one
    value per client per round, not the steps of every client.
    """

    values: dict[str, list[float]] = field(default_factory=dict)
    reducers: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    def log(self, name: str, value: Any, *args: Any, reduce_fx: Any = "mean", **_: Any) -> None:
        if is_metric(value):
            self.metrics[name] = value
            return
        value = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
        self.values.setdefault(name, []).append(value)
        self.reducers[name] = _reducer(reduce_fx)

    def log_dict(self, values: Any, *args: Any, **kwargs: Any) -> None:
        for name, value in dict(values.items()).items():
            self.log(name, value, **kwargs)

    def means(self) -> dict[str, float]:
        """Each name's value for the client (the Metrics computed, then reset)."""
        out = {}
        for name, seen in self.values.items():
            how = self.reducers[name]
            out[name] = {"sum": sum, "max": max, "min": min}.get(how, _mean)(seen)
        for name, metric in self.metrics.items():
            out[name] = float(metric.compute())
            metric.reset()
        return out


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def reset_metrics(module: Any) -> None:
    """Reset every torchmetrics ``Metric`` inside ``module`` (a client starts from none)."""
    for child in module.modules():
        if child is not module and is_metric(child):
            child.reset()


def capture_logs(module: Any, capture: LogCapture | None) -> None:
    """Point ``module.log`` / ``log_dict`` at ``capture`` (None: back to Lightning's own)."""
    for name in ("log", "log_dict"):
        if capture is None:
            module.__dict__.pop(name, None)
        else:
            module.__dict__[name] = getattr(capture, name)
