"""The ``client`` section: a client's local training (epochs or steps, learning rate,
optimizer, batch sizes, precision, gradient clipping)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedsim.checks import checked

OPTIMIZERS = ("sgd", "adam", "adamw")
PRECISIONS = ("32", "bf16-mixed")


def _betas_ok(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in value)
        and all(0 <= b < 1 for b in value)
    )


def _epochs_ok(value: Any) -> bool:
    return value is None or (
        isinstance(value, list)
        and len(value) >= 1
        and all(isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in value)
    )


@dataclass
class ClientConfig:
    epochs: int = checked(1, lambda v: v >= 1, "must be >= 1")  # local epochs per round
    # unequal local work: client k does epochs_by_client[k % len] epochs (FedNova's setting);
    # null: every client does client.epochs
    epochs_by_client: list | None = checked(
        None, _epochs_ok, "must be a non-empty list of integers >= 1 (or null)"
    )
    # local optimizer steps a round instead of epochs (FlowerTune's unit for language models;
    # each over client.grad_accumulation batches, the data reshuffled at each pass); null: epochs
    steps: int | None = checked(
        None, lambda v: v is None or v >= 1, "must be an integer >= 1 (or null: client.epochs)"
    )
    grad_accumulation: int = checked(  # batches whose gradients make one optimizer step
        1, lambda v: v >= 1, "must be an integer >= 1"
    )
    warmup_steps: int = checked(  # lr warm-up within a client's training: step i x min(1, (i+1)/w)
        0, lambda v: v >= 0, "must be an integer >= 0 (0: none)"
    )
    # the client learning rate; null: 0.005 for a model that takes client.* (the built-ins),
    # and for a module with its own configure_optimizers, its own (set it with model.args)
    lr: float | None = checked(
        None,
        lambda v: v is None or v > 0,
        "must be > 0 (or null: the model's default)",
        schedulable=True,
    )
    # sgd | adam | adamw; null: sgd for the built-ins, a module's own configure_optimizers
    optimizer: str | None = checked(
        None, lambda v: v is None or v in OPTIMIZERS, f"allowed: {', '.join(OPTIMIZERS)}"
    )
    batch_size: int = checked(10, lambda v: v >= 1, "must be >= 1")  # training batch size
    momentum: float = checked(  # SGD momentum
        0.0, lambda v: 0 <= v < 1, "must be in [0, 1)", schedulable=True
    )
    nesterov: bool = False  # SGD: Nesterov momentum (needs momentum > 0)
    betas: list = checked(  # adam / adamw: (beta1, beta2)
        predicate=_betas_ok, allowed="must be two numbers in [0, 1)", factory=lambda: [0.9, 0.999]
    )
    weight_decay: float = checked(  # L2 (adamw: decoupled)
        0.0, lambda v: v >= 0, "must be >= 0", schedulable=True
    )
    # Lightning's spelling: 32 | bf16-mixed (autocast to bfloat16 on CUDA; not on a CPU)
    precision: Any = checked("32", lambda v: str(v) in PRECISIONS, "allowed: 32, bf16-mixed")
    eval_batch_size: int = checked(500, lambda v: v >= 1, "must be >= 1")  # evaluation batch
    clip_grad_norm: float | None = checked(  # clip each step's gradient to this L2 norm
        None, lambda v: v is None or v > 0, "must be > 0 (or null: no clipping)", schedulable=True
    )

    def __post_init__(self) -> None:
        self.precision = str(self.precision)  # YAML reads 32 as a number
