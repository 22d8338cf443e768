"""The data that crosses the algorithm seam: what an algorithm is told about the
federation and a client, what it plans for a client's round, and what a client returns.

Plain dataclasses and protocols (no behaviour), so the runtime, deployment and every
algorithm share them without importing the ``Algorithm`` base class's logic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from fedsim.round_context import RoundContext
from lightning_modules.adapters import AdapterParts
from lightning_modules.flat_params import ParamLayout
from lightning_modules.hooks import ClientTerms

ServerState = dict[str, Any]
ClientState = dict[str, Any]


class ClientStates(Protocol):
    """Read access to clients' private states: the driver's ClientStateStore, or a dict."""

    def get(self, client: int) -> ClientState | None: ...


class ClientProbe(Protocol):
    """Worker-provided: measure any parameters on this client's own data (FedFomo, FedVG...).

    ``indices`` default to the client's train split (gradient) or test split (evaluate).
    Using the probe reloads the worker's module; the worker handles that.
    """

    train_indices: np.ndarray
    test_indices: np.ndarray

    def evaluate(self, params: torch.Tensor, indices: np.ndarray | None = None) -> Any:
        """An EvalResult (correct, loss_sum, num_samples) of ``params`` on ``indices``."""
        ...

    def gradient(
        self, params: torch.Tensor, indices: np.ndarray | None = None
    ) -> tuple[torch.Tensor, float]:
        """(flat gradient of the mean CE loss at ``params``, that loss) on ``indices``."""
        ...

    def batches(
        self, epochs: int = 1, indices: np.ndarray | None = None, key: int = 0
    ) -> list[np.ndarray]:
        """The client's minibatches (index arrays) over ``epochs`` shuffled passes of
        ``indices`` (default its train split), seeded by (seed, round, client, ``key``): for an
        algorithm's own per-batch loop with ``gradient``."""
        ...

    @property
    def lr(self) -> float:
        """The learning rate of this client's local steps this round (``client.lr``, a
        schedule's value of the round): for an algorithm's own SGD steps (pFedMe, APFL, FedRoD's
        personal head)."""
        ...

    def train(
        self,
        params: torch.Tensor,
        *,
        epochs: int = 1,
        terms: ClientTerms | None = None,
        frozen: list[str] | None = None,
        indices: np.ndarray | None = None,
        key: int = 0,
        label: str | None = None,
    ) -> tuple[torch.Tensor, float]:
        """(``params`` after ``epochs`` of local SGD with ``terms``, mean training loss).

        An extra training pass beside the worker's main one (Ditto's personal model, FedPer's
        fine-tune): same optimizer and batch size, seeded by (seed, round, client, ``key``).
        ``frozen`` parameters and float buffers get no gradient and come back unchanged.
        A non-finite loss stops the pass; the returned loss is then non-finite. ``label``:
        record the pass's mean loss and the module's ``self.log`` values as
        ``train/<label>/train_loss`` and ``train/<label>/<name>`` (None: not recorded).
        """
        ...


@dataclass(frozen=True)
class ClientInfo:
    """What the algorithm may know about a client: its id and its own data statistics."""

    client: int
    num_train: int
    class_counts: np.ndarray  # (K,) training samples per class
    round: int
    probe: ClientProbe | None = field(default=None, compare=False, repr=False)
    # what the worker does with the client this round (on the driver, both True): an
    # evaluation-only personalization (FedBABU's fine-tune) or a training-only pass
    # (FedRep's head epochs) runs only when it is needed
    evaluates: bool = True
    trains: bool = True
    # its local epochs this round (the run plan's: client.epochs / client.epochs_by_client);
    # on the driver, which trains nobody, 1
    epochs: int = 1
    # the round's frozen settings: a scheduled key is read from ``context.algorithm_params``
    context: RoundContext | None = field(default=None, compare=False, repr=False)

    @property
    def class_proportions(self) -> np.ndarray:
        return self.class_counts / max(int(self.class_counts.sum()), 1)


@dataclass
class FederationInfo:
    """Static facts about the federation, given to the algorithm at construction."""

    layout: ParamLayout
    num_clients: int
    num_classes: int
    train_sizes: np.ndarray  # (num_clients,)
    class_counts: np.ndarray  # (num_clients, K) training samples per class
    head_names: list[str]  # parameters of the output layer
    block_names: list[str]  # named blocks bottom -> top
    block_parameters: dict[str, list[str]]  # block -> parameter names
    client_train_indices: list[np.ndarray] = field(default_factory=list)  # into the dataset
    client_clusters: list[int] | None = None  # true cluster per client (relabel, rotation...)
    # the held-out clients' true clusters (eval.holdout_clients; ids num_clients.. in order)
    newcomer_clusters: list[int] | None = None
    partition: str = ""  # how clients got their data (data.partition.name, or natural)
    batch_size: int = 10  # client.batch_size (local steps: epochs x ceil(n_k / batch_size))
    buffer_names: list[str] = field(default_factory=list)  # float buffers (no gradient)
    # parameters and float buffers of the BatchNorm layers (FedBN keeps them on the client)
    batchnorm_names: list[str] = field(default_factory=list)
    # what an adapted model declares of its LoRA adapter (lightning_modules/adapters.py): its
    # variant and each module's A, B (residual, personal A and B) entries; None: no adapter
    adapters: AdapterParts | None = None


@dataclass(frozen=True)
class NewcomerRule:
    """How an algorithm serves a client that never trained (``eval.holdout_clients``): the
    model it evaluates with, in words, and where the rule comes from (the paper, PFLlib, or
    fedsim's choice). ``adapts``: the rule trains or measures on the newcomer's own train
    split. ``refused``: why the algorithm cannot serve a newcomer ("": it can)."""

    rule: str
    source: str
    adapts: bool = False
    refused: str = ""


@dataclass
class ClientPlan:
    """One client's round: evaluate with ``eval_params``, then train from ``train_params``."""

    train_params: torch.Tensor
    eval_params: torch.Tensor | None = None  # None: evaluate with train_params
    terms: ClientTerms | None = None
    train_indices: np.ndarray | None = None  # a subset to train on (None: the train split)
    context: dict[str, Any] = field(default_factory=dict)  # carried to client_finish
    frozen: list[str] | None = None  # parameters the local training leaves as they are
    epochs: int | None = None  # local epochs of this client (None: the run's; 0: no main pass)
    # an algorithm that keeps a client's optimizer state between rounds: hand it in here and
    # set keep_optimizer_state; after training the worker puts the new state here
    optimizer_state: dict[str, Any] | None = None
    keep_optimizer_state: bool = False


@dataclass
class ClientUpdate:
    """What a client returns: ``sums[key] = (weight, value)`` is reduced as a weighted sum."""

    sums: dict[str, tuple[float, torch.Tensor]] = field(default_factory=dict)
    individual: Any = None  # uploaded as is (algorithms that need every model)
    state: ClientState | None = None  # the client's new private state (None: unchanged)
    # the client's training loss when the algorithm trained it in its own loop (None: the
    # worker's main pass); not finite: the client failed (left out, its state unchanged)
    train_loss: float | None = None


@dataclass(frozen=True)
class ExchangeRound:
    """What ``train_round`` works with: the round, the client settings, and ``exchange``.

    ``exchange(tasks, broadcast)`` runs ``GradientTask`` / ``CurvatureTask`` s
    (``fedsim.gradient_tasks``) on the worker pool and returns their ``TaskOutput`` s in task
    order; ``broadcast`` is shipped once per worker per call. A plain callable: the algorithm
    never sees the executor.
    """

    round: int
    seed: int  # the run's seed: draw every minibatch from (seed, round, ...)
    lr: float  # client.lr
    batch_size: int  # client.batch_size
    exchange: Callable[[list[Any], dict[str, Any]], list[Any]] = field(repr=False)


@dataclass
class RoundReport:
    """What a ``train_round`` reports beside the new state.

    ``summary``: keys added to the round's summary (metrics.jsonl; numbers also go to W&B),
    ``bytes_down`` / ``bytes_up`` / ``train_loss`` / ``num_trained`` among them;
    ``client_weights``: the ``weight`` column of clients.csv, per client.
    """

    summary: dict[str, Any] = field(default_factory=dict)
    client_weights: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelUpload:
    """What a client uploads as a model update (``fedsim/deployment/``: attacks, clipping,
    privacy noise, compression, robust aggregation act on it; the algorithm never sees them).

    ``ranges``: the [start, stop) entries of the flat model it uploads, relative to the model
    it trained from (None: all of them). ``sums``: patterns (fnmatch) of the weighted sums
    that are means of that upload over clients who all received the same model, so a robust
    rule or central noise may replace their mean; empty when no sum is (cwFedAvg's class
    sums weigh each client's own personalized model by r_ij).
    """

    ranges: list[tuple[int, int]] | None = None
    sums: tuple[str, ...] = ()
