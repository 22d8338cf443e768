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
- ``RunPlan``: these with the round kind, the cohort size and the updates the server
  combines at once (a round's cohort, or an asynchronous run's buffer K).

The random streams have their own registry (``fedsim/streams.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedsim.config import ExperimentConfig
from fedsim.config.sections import lr_scale


@dataclass(frozen=True)
class LearningRate:
    """The clients' learning rate in each round (picklable: it travels in the WorkerSpec)."""

    base: float
    schedule: str = "constant"  # client.lr_schedule
    decay: float = 1.0
    rounds: int = 1

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, base: float | None = None) -> LearningRate:
        c = cfg.client
        return cls(c.lr if base is None else base, c.lr_schedule, c.lr_decay, cfg.rounds)

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
    lr: float = 0.005
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


def default_buffer_size(concurrency: int) -> int:
    """K when ``asynchronous.buffer_size`` is null: half the clients in flight (at least 1)."""
    return max(1, concurrency // 2)


def cohort_size(cfg: ExperimentConfig, num_clients: int) -> int:
    """The clients a synchronous round samples: ``int(join_ratio x clients)``, at least 1."""
    return max(1, int(cfg.join_ratio * num_clients))


def resolve_run_plan(
    cfg: ExperimentConfig, kind: str, num_clients: int, base_lr: float | None = None
) -> RunPlan:
    """The run plan of ``cfg`` for a run of ``kind`` on ``num_clients`` clients."""
    cohort = cohort_size(cfg, num_clients)
    server, concurrency = cohort, None
    source = f"join_ratio={cfg.join_ratio} x data.num_clients={num_clients}"
    if kind == "buffered":
        a = cfg.asynchronous
        concurrency = a.concurrency or cohort
        server = a.buffer_size or default_buffer_size(concurrency)
        given = "" if a.buffer_size else " (default: half the clients in flight)"
        source = f"asynchronous.enabled=true: a buffer of asynchronous.buffer_size{given}"
    return RunPlan(
        kind=kind,
        lr=LearningRate.from_config(cfg, base_lr),
        epochs=LocalEpochs.from_config(cfg),
        optimizer=OptimizerSettings.from_config(cfg),
        num_clients=num_clients,
        cohort_size=cohort,
        server_cohort=server,
        concurrency=concurrency,
        cohort_source=source,
    )
