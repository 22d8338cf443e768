"""The seam of the upload pipeline: one ``UploadStage`` per deployment option.

A stage has a client side and a server side, as pfl-research's postprocessors do:

- ``client_step(client, round)``: decided on the driver when the round's tasks are built,
  a small picklable ``ClientStep`` the worker applies to the client's update (the delta of
  the uploaded entries), or None where the stage does nothing for that client;
- ``server(aggregation)``: on the driver, before the algorithm aggregates: it may replace
  or change the round's sums and adds its metrics (metrics.jsonl keys);
- ``state_dict`` / ``load_state_dict``: what a resumed run needs of it.

The pipeline runs the client steps in stage order and the server sides in reverse order,
so the last thing a client did to its update is the first thing the server sees.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedsim.algorithms.sums import WeightedSum
from fedsim.deployment.compression import Sparse

ClientSums = dict[str, tuple[float, torch.Tensor]]


@dataclass
class StepContext:
    """What a client step may read or record besides the delta it transforms."""

    seed: int
    round: int
    client: int
    report: Any  # the client's UploadReport (fedsim/deployment/upload.py)
    sparse: Sparse | None = None  # set by compression: later steps act on its values only


class ClientStep:
    """One stage's work on one client's update (picklable: it travels with the task)."""

    def apply(self, delta: torch.Tensor, context: StepContext) -> torch.Tensor:
        raise NotImplementedError


class TrainingView:
    """One stage's change to what a client trains on (picklable: it travels with the task):
    the data its main pass reads and the class counts the algorithm sees of it. The worker
    applies it without knowing which stage it is (label flipping, for one)."""

    def data(self, data: Any) -> Any:
        return data

    def class_counts(self, counts: np.ndarray) -> np.ndarray:
        return counts


@dataclass
class ServerAggregation:
    """One server update as the server stages see it.

    ``sums``: what the algorithm will aggregate (a stage may replace it); ``trained``: the
    results of the clients in it; ``individual``: each one's own sums (when a stage asked
    for them); ``patterns``: which sums are means of the model upload; ``metrics``: the
    keys the stages add to the round's summary.
    """

    round: int
    sums: dict[str, WeightedSum]
    trained: list[Any]
    individual: dict[int, ClientSums]
    patterns: tuple[str, ...]
    metrics: dict[str, Any] = field(default_factory=dict)


class UploadStage:
    """A deployment option; the defaults do nothing, keep nothing and report nothing."""

    needs_individual = False  # the server needs each client's sums on their own
    needs_delta = False  # ... and its flat model update

    def client_step(self, client: int, round_idx: int) -> ClientStep | None:
        return None

    def training_view(self, client: int, round_idx: int) -> TrainingView | None:
        """How the client's training data looks to it this round (None: as it is)."""
        return None

    def server(self, aggregation: ServerAggregation) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Start afresh (None) or continue from a checkpoint's ``state_dict``."""


def is_model_sum(key: str, patterns: Iterable[str]) -> bool:
    """Whether sum ``key`` is a mean of the model upload (one of the algorithm's ``patterns``)."""
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)
