"""The run plan: every per-round and per-client setting, resolved once when a run is built.

Before, the round's learning rate was computed in four places, a client's local epochs in
two, and the cohort and buffer sizes twice each. Now each has one home here, and everything
that needs one reads it from the plan (the worker through ``WorkerSpec``):

- ``LearningRate``: the clients' base lr (``client.lr``, or the module's own optimizer's)
  times ``client.lr_schedule``'s factor in a round;
- ``LocalEpochs``: a client's local epochs (``client.epochs_by_client`` cycled, else
  ``client.epochs``), which training, FedNova, the virtual clock and the pool's balancing read;
- ``OptimizerSettings``: ``client.optimizer`` and its settings, which reach the module by
  one builder (``fedsim.runtime.model_fit.build_client_model``) on the driver and the worker;
- ``ModelBuild``: the model's name, ``model.args`` and what fedsim passes its constructor
  (the data's shapes, the optimizer's constructor settings, ``model.hidden``);
- ``ScheduledValues``: every key given as a schedule (``fedsim/schedules.py``), resolved
  per round on the driver into a ``RoundValues`` that travels to the workers with the
  round's broadcast (the lr and its factor too, so a worker computes none of them);
- ``RunPlan``: these with the round kind, the cohort size and the updates the server
  combines at once (a round's cohort, or an asynchronous run's buffer K), and the client
  work settings a worker is built with (``fedsim.runtime.worker.WorkerSpec.from_plan``).

The random streams have their own registry (``fedsim/streams.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fedsim.config import ExperimentConfig
from fedsim.config.model_optimizer import BUILT_IN_LR
from fedsim.config.sections import lr_scale
from fedsim.schedules import Adapting, Schedule

ROUND_VALUES = "round_values"  # the broadcast's entry for the round's RoundValues


@dataclass(frozen=True)
class LearningRate:
    """The clients' learning rate in each round (picklable: it travels in the WorkerSpec)."""

    base: float
    schedule: str = "constant"  # client.lr_schedule
    decay: float = 1.0
    rounds: int = 1

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, base: float) -> LearningRate:
        """``base``: the lr clients start from (``client.lr``, or the module's own)."""
        c = cfg.client
        return cls(base, c.lr_schedule, c.lr_decay, cfg.rounds)

    @property
    def scheduled(self) -> bool:
        return self.schedule != "constant"

    def scale(self, round_idx: int) -> float:
        """The schedule's factor on the base lr in round ``round_idx``."""
        return lr_scale(self.schedule, self.decay, self.rounds, round_idx)

    def at(self, round_idx: int) -> float:
        """The lr every client steps with in round ``round_idx``."""
        return self.base * self.scale(round_idx)


@dataclass(frozen=True)
class LocalEpochs:
    """Each client's local epochs: ``by_client`` cycled over the clients, else ``epochs``."""

    epochs: int = 1
    by_client: tuple[int, ...] | None = None

    @classmethod
    def from_config(cls, cfg: ExperimentConfig) -> LocalEpochs:
        cycle = cfg.client.epochs_by_client
        return cls(cfg.client.epochs, None if cycle is None else tuple(int(e) for e in cycle))

    def of(self, client: int) -> int:
        cycle = self.by_client
        return self.epochs if cycle is None else cycle[client % len(cycle)]

    def all(self, num_clients: int) -> list[int]:
        return [self.of(k) for k in range(num_clients)]


@dataclass(frozen=True)
class OptimizerSettings:
    """``client.optimizer`` and its settings, for a model that trains with them."""

    name: str = "sgd"
    lr: float = BUILT_IN_LR
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    nesterov: bool = False

    @classmethod
    def from_config(cls, cfg: ExperimentConfig) -> OptimizerSettings:
        c = cfg.client
        return cls(
            name=c.optimizer or "sgd",
            lr=c.lr,
            momentum=c.momentum,
            weight_decay=c.weight_decay,
            betas=(float(c.betas[0]), float(c.betas[1])),
            nesterov=bool(c.nesterov),
        )

    def constructor_kwargs(self, owns_optimizers: bool) -> dict[str, Any]:
        """What the model's constructor gets (nothing for a module with its own optimizer)."""
        if owns_optimizers:
            return {}
        return {"lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay}

    def apply(self, module: Any) -> None:
        """Set the settings a built-in module reads in ``configure_optimizers``."""
        from lightning_modules.base import FLModule

        if isinstance(module, FLModule):
            module.optimizer_name, module.betas = self.name, self.betas
            module.nesterov = self.nesterov


@dataclass(frozen=True)
class ModelBuild:
    """How every copy of the model is built (the driver's template, each worker's)."""

    name: str  # model.name
    args: dict[str, Any]  # model.args: the user's constructor arguments
    kwargs: dict[str, Any]  # what fedsim passes: data shapes, optimizer settings, hidden
    optimizer: OptimizerSettings

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, data_kwargs: dict[str, Any]) -> ModelBuild:
        """``data_kwargs``: the dataset's shapes (``Dataset.model_kwargs``). A module with
        its own ``configure_optimizers`` gets no optimizer settings: it owns its optimizer.
        An algorithm that declares an adapter variant beyond plain LoRA (``ADAPTER``:
        residual, personal) has the model build it (``adapter_variant``)."""
        from fedsim.algorithm_params import adapter
        from lightning_modules.registry import model_class, owns_optimizers

        optimizer = OptimizerSettings.from_config(cfg)
        own = owns_optimizers(model_class(cfg.model.name))
        hidden = {} if cfg.model.hidden is None else {"hidden": tuple(cfg.model.hidden)}
        variant = adapter(cfg.algorithm.name)
        asks = {"adapter_variant": variant} if variant not in (None, "lora") else {}
        kwargs = {**data_kwargs, **optimizer.constructor_kwargs(own), **hidden, **asks}
        return cls(cfg.model.name, dict(cfg.model.args), kwargs, optimizer)


@dataclass(frozen=True)
class RoundValues:
    """A round's values that change over rounds, as the workers get them (picklable)."""

    lr: float  # the lr every client steps with this round
    lr_scale: float  # its factor on the optimizer's own lr (client.lr_schedule or a schedule)
    algorithm: dict[str, float] = field(default_factory=dict)  # scheduled algorithm.* keys
    client: dict[str, float] = field(default_factory=dict)  # scheduled client.* (but lr)

    @property
    def optimizer_settings(self) -> dict[str, float]:
        """Scheduled settings the optimizer's parameter groups take each round."""
        return {k: v for k, v in self.client.items() if k in ("momentum", "weight_decay")}

    def recorded(self, lr_scheduled: bool) -> dict[str, float]:
        """metrics.jsonl's entries: ``lr`` when it changes over rounds, every scheduled key
        by its dotted name."""
        out = {"lr": self.lr} if lr_scheduled else {}
        out.update({f"algorithm.{k}": v for k, v in self.algorithm.items()})
        out.update({f"client.{k}": v for k, v in self.client.items()})
        return out


class ScheduledValues:
    """Every key given as a schedule, resolved per round on the driver; an adaptive one is
    moved by each committed round's metrics (``observe``) and rebuilt from a resumed run's
    history (``replay``), so its state is as exact as the records a checkpoint keeps."""

    def __init__(self, schedules: dict[str, Schedule], lr: LearningRate, rounds: int):
        self.schedules, self.lr, self.rounds = dict(schedules), lr, rounds
        self.adapting = {k: Adapting(s) for k, s in self.schedules.items() if s.adaptive}

    @property
    def lr_scheduled(self) -> bool:
        return self.lr.scheduled or "client.lr" in self.schedules

    def value(self, key: str, round_idx: int) -> float:
        if key in self.adapting:
            return self.adapting[key].value
        return self.schedules[key].at(round_idx, self.rounds)

    def at(self, round_idx: int) -> RoundValues:
        """Round ``round_idx``'s values."""
        if "client.lr" in self.schedules:
            lr = self.value("client.lr", round_idx)
            scale = lr / self.lr.base
        else:
            lr, scale = self.lr.at(round_idx), self.lr.scale(round_idx)
        sections: dict[str, dict[str, float]] = {"algorithm": {}, "client": {}}
        for key in self.schedules:
            section, name = key.split(".")
            if key != "client.lr":
                sections[section][name] = self.value(key, round_idx)
        return RoundValues(lr, scale, sections["algorithm"], sections["client"])

    def lr_at(self, round_idx: int) -> float:
        """The clients' lr in round ``round_idx``."""
        return self.at(round_idx).lr

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
    epochs: LocalEpochs
    optimizer: OptimizerSettings
    num_clients: int
    cohort_size: int  # int(join_ratio x clients), at least 1
    server_cohort: int  # updates the server combines at once (the cohort, or buffer K)
    concurrency: int | None = None  # buffered: clients in flight
    cohort_source: str = "join_ratio"  # the keys that set server_cohort (for messages)
    model: ModelBuild | None = None  # how the model is built (None: a plan without one)
    values: ScheduledValues | None = field(default=None, compare=False)  # per round
    seed: int = 0
    batch_size: int = 10  # client.batch_size
    eval_batch_size: int = 500  # client.eval_batch_size
    clip_grad_norm: float | None = None  # client.clip_grad_norm (round 0's, if scheduled)
    bf16: bool = False  # client.precision=bf16-mixed
    eval_model: str = "personal"  # eval.model
    eval_after_training: bool = False  # eval.when=after_training
    finetune_epochs: int = 1  # eval.finetune_epochs: a held-out client's adaptation
    count_flops: bool = False  # eval.count_flops: each client's training FLOPs


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
    c = cfg.client
    return RunPlan(
        kind=kind,
        lr=lr,
        epochs=LocalEpochs.from_config(cfg),
        optimizer=OptimizerSettings.from_config(cfg) if model is None else model.optimizer,
        num_clients=num_clients,
        cohort_size=cohort,
        server_cohort=server,
        concurrency=concurrency,
        cohort_source=source,
        model=model,
        values=ScheduledValues(cfg.schedules, lr, cfg.rounds),
        seed=cfg.seed,
        batch_size=c.batch_size,
        eval_batch_size=c.eval_batch_size,
        clip_grad_norm=c.clip_grad_norm,
        bf16=c.precision == "bf16-mixed",
        eval_model=cfg.eval.model,
        eval_after_training=cfg.eval.when == "after_training",
        finetune_epochs=cfg.eval.finetune_epochs,
        count_flops=cfg.eval.count_flops,
    )
