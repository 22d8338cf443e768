"""The run plan: every per-round and per-client setting, resolved once when a run is built.

Before, the round's learning rate was computed in four places, a client's local epochs in
two, and the cohort and buffer sizes twice each. Now each has one home here, and everything
that needs one reads it from the plan (the worker through ``WorkerSpec``):

- ``LearningRate``: the clients' base lr (``client.lr``, or the module's own optimizer's);
  a schedule on ``client.lr`` gives each round's (``client.lr_schedule`` is read as one);
- ``ClientWork`` (``fedsim/client_work.py``): a client's local work (epochs or steps,
  accumulation, warm-up: ``LocalWork``), optimizer settings and the batch, clipping and
  evaluation settings, the slice of the plan a worker is built with (``WorkerSpec``);
- ``ModelBuild``: the model's name, ``model.args``, what fedsim passes its constructor
  (the data's shapes, ``model.hidden``) and the optimizer settings it sets on a built-in;
- ``ScheduledValues``: every key given as a schedule (``fedsim/schedules.py``), resolved
  per round on the driver into that round's frozen ``RoundContext``
  (``fedsim/round_context.py``), which the driver's algorithm and every client task of the
  round receive as an argument (the lr and its factor too, so a worker computes none);
- ``RunPlan``: these with the round kind, the cohort size and the updates the server
  combines at once (a round's cohort, or an asynchronous run's buffer K).

The random streams have their own registry (``fedsim/streams.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from fedsim.client_work import ClientWork, LocalWork, OptimizerSettings
from fedsim.config import ExperimentConfig
from fedsim.round_context import RoundContext
from fedsim.schedules import Adapting, Schedule


@dataclass(frozen=True)
class LearningRate:
    """The lr clients start from (``client.lr``, round 0's when it is a schedule, or the
    module's own); a round's lr is in its ``RoundContext``."""

    base: float

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, base: float) -> LearningRate:
        """``base``: the lr clients start from (``client.lr``, or the module's own)."""
        return cls(base)


@dataclass(frozen=True)
class ModelBuild:
    """How every copy of the model is built (the driver's template, each worker's)."""

    name: str  # model.name
    args: dict[str, Any]  # model.args: the user's constructor arguments
    kwargs: dict[str, Any]  # what fedsim passes its constructor: data shapes, hidden
    optimizer: OptimizerSettings

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, data_kwargs: dict[str, Any]) -> ModelBuild:
        """``data_kwargs``: the dataset's shapes (``Dataset.model_kwargs``). An algorithm
        that declares an adapter variant beyond plain LoRA (``ADAPTER``: residual, personal,
        scaled) has the model build it (``adapter_variant``)."""
        from fedsim.algorithm_params import adapter

        optimizer = OptimizerSettings.from_config(cfg)
        hidden = {} if cfg.model.hidden is None else {"hidden": tuple(cfg.model.hidden)}
        variant = adapter(cfg.algorithm.name)
        asks = {"adapter_variant": variant} if variant not in (None, "lora") else {}
        kwargs = {**data_kwargs, **hidden, **asks}
        return cls(cfg.model.name, dict(cfg.model.args), kwargs, optimizer)

    def apply(self, module: Any) -> None:
        """Set ``client.optimizer``'s settings on a built-in module (one way: its
        ``configure_optimizers`` reads them); a module with its own optimizer gets none."""
        from lightning_modules.base import FLModule
        from lightning_modules.registry import owns_optimizers

        if isinstance(module, FLModule) and not owns_optimizers(type(module)):
            o = self.optimizer
            module.optimizer_name, module.lr, module.betas = o.name, o.lr, o.betas
            module.momentum, module.weight_decay, module.nesterov = (
                o.momentum, o.weight_decay, o.nesterov,
            )  # fmt: skip


class ScheduledValues:
    """Every key given as a schedule, resolved per round on the driver into that round's
    ``RoundContext``; an adaptive one is moved by each committed round's metrics
    (``observe``) and rebuilt from a resumed run's history (``replay``), so its state is as
    exact as the records a checkpoint keeps."""

    def __init__(
        self,
        schedules: dict[str, Schedule],
        lr: LearningRate,
        rounds: int,
        algorithm_params: Any = None,
        clip_grad_norm: float | None = None,
    ):
        self.schedules, self.lr, self.rounds = dict(schedules), lr, rounds
        self.algorithm_params, self.clip_grad_norm = algorithm_params, clip_grad_norm
        self.adapting = {k: Adapting(s) for k, s in self.schedules.items() if s.adaptive}

    @property
    def lr_scheduled(self) -> bool:
        return "client.lr" in self.schedules

    def value(self, key: str, round_idx: int) -> float:
        """``key``'s value in round ``round_idx`` (an integer key's as an int: an epoch count
        a loop runs over)."""
        schedule = self.schedules[key]
        if key in self.adapting:
            value = self.adapting[key].value
        else:
            value = schedule.at(round_idx, self.rounds)
        return int(value) if schedule.integer else value

    def at(self, round_idx: int) -> RoundContext:
        """Round ``round_idx``'s context: its lr, optimizer settings, clipping and the
        algorithm's params with the round's scheduled keys (a new frozen value each call)."""
        lr, scale = self.lr.base, 1.0
        if "client.lr" in self.schedules:
            lr = self.value("client.lr", round_idx)
            scale = lr / self.lr.base
        sections: dict[str, dict[str, float]] = {"algorithm": {}, "client": {}}
        for key in self.schedules:
            section, name = key.split(".")
            if key != "client.lr":
                sections[section][name] = self.value(key, round_idx)
        algorithm, client = sections["algorithm"], sections["client"]
        params = self.algorithm_params
        if algorithm:
            params = dataclasses.replace(params, **algorithm)  # a new value: nothing mutated
        recorded = {"lr": lr} if self.lr_scheduled else {}
        recorded.update({f"algorithm.{k}": v for k, v in algorithm.items()})
        recorded.update({f"client.{k}": v for k, v in client.items()})
        return RoundContext(
            round=round_idx,
            algorithm_params=params,
            lr=lr,
            lr_scale=scale,
            optimizer={k: v for k, v in client.items() if k in ("momentum", "weight_decay")},
            clip_grad_norm=client.get("clip_grad_norm", self.clip_grad_norm),
            recorded=recorded,
        )

    def lr_at(self, round_idx: int) -> float:
        """The clients' lr in round ``round_idx``."""
        return self.at(round_idx).lr  # type: ignore[return-value]

    def observe(self, round_idx: int, summary: dict[str, Any]) -> None:
        """After round ``round_idx`` is committed: adaptive values see its metrics."""
        for adapting in self.adapting.values():
            adapting.observe(round_idx, summary)

    def replay(self, history: list[dict[str, Any]]) -> None:
        """A resumed run: the rounds it ran, seen again from round 0's state."""
        self.adapting = {k: Adapting(s) for k, s in self.schedules.items() if s.adaptive}
        for summary in history:
            self.observe(summary["round"], summary)


@dataclass(frozen=True)
class RunPlan:
    """A run's settings, resolved once (see the module docstring)."""

    kind: str  # local | exchange | buffered (fedsim/rounds/compose.py)
    lr: LearningRate
    client: ClientWork  # what every client's work is made of: the worker's slice of the plan
    num_clients: int
    cohort_size: int  # int(join_ratio x clients), at least 1
    server_cohort: int  # updates the server combines at once (the cohort, or buffer K)
    concurrency: int | None = None  # buffered: clients in flight
    cohort_source: str = "join_ratio"  # the keys that set server_cohort (for messages)
    model: ModelBuild | None = None  # how the model is built (None: a plan without one)
    values: ScheduledValues | None = field(default=None, compare=False)  # per round

    @property
    def epochs(self) -> LocalWork:
        """Each client's local work (epochs or steps, accumulation, warm-up)."""
        return self.client.local

    @property
    def optimizer(self) -> OptimizerSettings:
        return self.client.optimizer


def default_buffer_size(concurrency: int) -> int:
    """K when ``asynchronous.buffer_size`` is null: half the clients in flight (at least 1)."""
    return max(1, concurrency // 2)


def cohort_size(cfg: ExperimentConfig, num_clients: int) -> int:
    """The clients a synchronous round samples: ``int(join_ratio x clients)``, at least 1."""
    return max(1, int(cfg.join_ratio * num_clients))


def resolve_run_plan(
    cfg: ExperimentConfig,
    kind: str,
    num_clients: int,
    base_lr: float | None = None,
    model: ModelBuild | None = None,
) -> RunPlan:
    """The run plan of ``cfg`` for a run of ``kind`` on ``num_clients`` clients; ``base_lr``:
    the lr clients start from (None: ``client.lr``; a module's own optimizer sets its own);
    ``model``: how the model is built (``ModelBuild.from_config``)."""
    cohort = cohort_size(cfg, num_clients)
    server, concurrency = cohort, None
    source = f"join_ratio={cfg.join_ratio} x data.num_clients={num_clients}"
    if kind == "buffered":
        a = cfg.asynchronous
        concurrency = a.concurrency or cohort
        server = a.buffer_size or default_buffer_size(concurrency)
        given = "" if a.buffer_size else " (default: half the clients in flight)"
        source = f"asynchronous.enabled=true: a buffer of asynchronous.buffer_size{given}"
    lr = LearningRate.from_config(cfg, cfg.client.lr if base_lr is None else base_lr)
    optimizer = OptimizerSettings.from_config(cfg) if model is None else model.optimizer
    return RunPlan(
        kind=kind,
        lr=lr,
        client=ClientWork.from_config(cfg, optimizer),
        num_clients=num_clients,
        cohort_size=cohort,
        server_cohort=server,
        concurrency=concurrency,
        cohort_source=source,
        model=model,
        values=ScheduledValues(
            cfg.schedules, lr, cfg.rounds, cfg.algorithm.params, cfg.client.clip_grad_norm
        ),
    )
