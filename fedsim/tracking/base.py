"""The sink seam: the simulation hands every sink the same records."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ClientRow:
    client: int
    round: int
    accuracy: float
    loss: float
    n: int  # test samples (next-token prediction: test tokens)
    classes: int  # classes present in the client's training data
    weight: float | None = None  # its share of this round's aggregate (None: did not train)
    attacked: bool | None = None  # an attacker (attack.kind set; None: no attack configured)
    held_out: bool | None = None  # never trained (eval.holdout_clients set; else None)
    global_accuracy: float | None = None  # the global model's (eval.model=both; else None)
    val_accuracy: float | None = None  # on its validation split (eval.validation_ratio > 0)
    flops: int | None = None  # its local training's FLOPs this round (eval.count_flops)
    peak_memory_mib: float | None = None  # its training's peak GPU memory (eval.count_flops)
    perplexity: float | None = None  # exp(loss): next-token prediction only (else None)
    # the standard deviation of its per-token losses (next-token prediction only): a
    # perplexity's noise band in fedsim compare (fedsim/tracking/hurt_metric.py)
    loss_sd: float | None = None
    # what the module logged with self.log in training_step (mean over the client's steps);
    # clients.csv writes each as a column train/<name>
    train: dict[str, float] | None = None


@dataclass
class RoundRecord:
    """One round: its summary metrics (``summary``) and per-client evaluations."""

    round: int
    summary: dict[str, Any]
    clients: list[ClientRow] = field(default_factory=list)


class Sink:
    """Receives the run's life: start, every round, the end. Methods default to no-ops."""

    def start(self, run_dir: Path, config: dict[str, Any], partition: dict[str, Any]) -> None:
        """Called once before round 0."""

    def log_round(self, record: RoundRecord) -> None:
        """Called after every round."""

    def finish(self, summary: dict[str, Any]) -> None:
        """Called once at the end, with the ``{"best", "final"}`` summary."""

    def close(self) -> None:
        """Release resources, also after an error."""


class MemorySink(Sink):
    """Keeps every round's record in ``records`` (notebooks, tests: no files needed)."""

    def __init__(self) -> None:
        self.records: list[RoundRecord] = []

    def log_round(self, record: RoundRecord) -> None:
        self.records.append(record)
