"""A client's work, as the run plan resolves it once and every reader takes it: a worker
(``WorkerSpec`` holds this slice of the plan, not a copy of its fields), the virtual clock,
the pool's balancing and the executor's estimate. A new per-client setting is one field here.

- ``LocalWork``: local epochs (``client.epochs``, ``client.epochs_by_client`` cycled) or
  optimizer steps (``client.steps``), gradient accumulation (``client.grad_accumulation``),
  a linear lr warm-up within a client's training (``client.warmup_steps``), and the one
  formula for the samples a client trains on in a round (what its compute time is made of);
- ``OptimizerSettings``: ``client.optimizer`` and its settings (their defaults are
  ``ClientConfig``'s), which reach a built-in module one way, set on it when it is built
  (``ModelBuild.apply``, from ``fedsim.runtime.model_fit.build_client_model``);
- ``ClientWork``: these with the batch sizes, seed, clipping, precision and evaluation
  settings a worker trains and evaluates every client with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedsim.config import ExperimentConfig


@dataclass(frozen=True)
class LocalWork:
    """Each client's local training: ``by_client`` epochs cycled over the clients, else
    ``epochs``; or ``steps`` optimizer steps (then no epochs), each over ``accumulation``
    micro-batches; the lr warmed up linearly over the first ``warmup_steps`` steps."""

    epochs: int = 1
    by_client: tuple[int, ...] | None = None
    batch_size: int = 10  # client.batch_size
    steps: int | None = None  # client.steps: optimizer steps instead of epochs
    accumulation: int = 1  # client.grad_accumulation: micro-batches per optimizer step
    warmup_steps: int = 0  # client.warmup_steps: step i (from 0) takes lr x min(1, (i+1)/w)

    @classmethod
    def from_config(cls, cfg: ExperimentConfig) -> LocalWork:
        c = cfg.client
        cycle = None if c.epochs_by_client is None else tuple(int(e) for e in c.epochs_by_client)
        return cls(c.epochs, cycle, c.batch_size, c.steps, c.grad_accumulation, c.warmup_steps)

    def of(self, client: int) -> int:
        """``client``'s local epochs (with ``steps``: the epochs of an algorithm's own passes)."""
        cycle = self.by_client
        return self.epochs if cycle is None else cycle[client % len(cycle)]

    def all(self, num_clients: int) -> list[int]:
        return [self.of(k) for k in range(num_clients)]

    def samples(self, client: int, num_train: float) -> float:
        """Samples ``client`` (``num_train`` of them) trains on in a round, the one formula
        of its compute time: its epochs x ``num_train``, or the batches of ``steps``
        optimizer steps as the loop takes them (``accumulation`` batches a step; a pass's
        last step takes what is left of the pass, its last batch smaller)."""
        if self.steps is None:
            return float(self.of(client)) * float(num_train)
        if num_train <= 0:
            return 0.0
        per_pass = math.ceil(num_train / self.batch_size)  # batches in one pass
        steps_per_pass = math.ceil(per_pass / self.accumulation)
        passes, rest = divmod(self.steps, steps_per_pass)
        return float(passes * num_train + min(rest * self.accumulation * self.batch_size,
                                              num_train))  # fmt: skip

    def all_samples(self, train_sizes: Any) -> np.ndarray:
        """``samples`` of every client, in client order."""
        return np.array([self.samples(k, float(n)) for k, n in enumerate(train_sizes)])


@dataclass(frozen=True)
class OptimizerSettings:
    """``client.optimizer`` and its settings, for a model that trains with them."""

    name: str  # defaults: ClientConfig's (the one home), resolved by model_optimizer.py
    lr: float
    momentum: float
    weight_decay: float
    betas: tuple[float, float]
    nesterov: bool

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


@dataclass(frozen=True)
class ClientWork:
    """What a worker trains and evaluates every client with (the plan's slice it gets)."""

    optimizer: OptimizerSettings
    local: LocalWork = field(default_factory=LocalWork)
    seed: int = 0
    eval_batch_size: int = 500  # client.eval_batch_size
    clip_grad_norm: float | None = None  # client.clip_grad_norm (round 0's, if scheduled)
    bf16: bool = False  # client.precision=bf16-mixed
    eval_model: str = "personal"  # eval.model
    eval_after_training: bool = False  # eval.when=after_training
    finetune_epochs: int = 1  # eval.finetune_epochs: a held-out client's adaptation
    count_flops: bool = False  # eval.count_flops: each client's training FLOPs

    @classmethod
    def from_config(cls, cfg: ExperimentConfig, optimizer: OptimizerSettings) -> ClientWork:
        c = cfg.client
        return cls(
            optimizer=optimizer, local=LocalWork.from_config(cfg), seed=cfg.seed,
            eval_batch_size=c.eval_batch_size,
            clip_grad_norm=c.clip_grad_norm, bf16=c.precision == "bf16-mixed",
            eval_model=cfg.eval.model, eval_after_training=cfg.eval.when == "after_training",
            finetune_epochs=cfg.eval.finetune_epochs, count_flops=cfg.eval.count_flops,
        )  # fmt: skip
