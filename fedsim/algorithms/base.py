"""The algorithm seam: server math and client-side behaviour of one FL algorithm.

An algorithm is pure torch and picklable; it never imports Ray and never runs a training
loop. The runtime calls it in this order each round (FedJAX's init/apply, split the way
pfl-research splits algorithm from backend):

driver   ``broadcast(state)`` once per round, ``client_payload(state, client)`` per client
worker   ``client_start``  -> a ``ClientPlan`` (parameters to evaluate with and train from,
                              and the client terms the LightningModule calls while training)
worker   ``client_finish`` -> a ``ClientUpdate`` (weighted sums the worker accumulates,
                              an optional individual upload, the client's new private state)
driver   ``aggregate(state, sums, individual, round)`` -> new server state

``download_nbytes`` / ``upload_nbytes`` say what a client would receive and send under the
algorithm's own protocol (the round's ``bytes_down`` / ``bytes_up``), where the simulation's
payloads differ from it.

On the driver, from a server state and the clients' private states alone (a finished run or
its final checkpoint): ``personalized_params`` is the model a client evaluates with, and
``figures`` is what the algorithm wants drawn (plain ``fedsim.figures`` specs that tracking
draws without knowing the algorithm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import torch

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithms.sums import WeightedSum
from fedsim.figures import Figure
from fedsim.sizes import nbytes
from lightning_modules.flat_params import ParamLayout
from lightning_modules.hooks import ClientTerms

if TYPE_CHECKING:
    from fedsim.data.datasets import ImageDataset
    from fedsim.data.federated import FederatedData

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
        """The learning rate of this client's local steps this round (``client.lr`` under
        ``client.lr_schedule``): for an algorithm's own SGD steps (pFedMe, APFL, FedRoD's
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
    ) -> tuple[torch.Tensor, float]:
        """(``params`` after ``epochs`` of local SGD with ``terms``, mean training loss).

        An extra training pass beside the worker's main one (Ditto's personal model, FedPer's
        fine-tune): same optimizer and batch size, seeded by (seed, round, client, ``key``).
        ``frozen`` parameters and float buffers get no gradient and come back unchanged.
        A non-finite loss stops the pass; the returned loss is then non-finite.
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
    partition: str = ""  # how clients got their data (data.partition.name, or natural)
    client_epochs: list[int] = field(default_factory=list)  # local epochs of each client
    batch_size: int = 10  # client.batch_size (local steps: epochs x ceil(n_k / batch_size))
    buffer_names: list[str] = field(default_factory=list)  # float buffers (no gradient)
    # parameters and float buffers of the BatchNorm layers (FedBN keeps them on the client)
    batchnorm_names: list[str] = field(default_factory=list)


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


class Algorithm:
    """Base class: override what differs (Flower's economy: FedProx(FedAvg) is a few lines)."""

    name: ClassVar[str] = ""
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    # True: a round is ``train_round`` (many gradient exchanges), not local training
    trains_by_exchange: ClassVar[bool] = False
    # True: clients train in the algorithm's own per-batch loop through the probe (pFedMe,
    # Per-FedAvg, APFL: plain SGD at ``probe.lr``; ``ClientPlan.epochs`` 0 skips the worker's
    # main pass). The settings that act on the main pass (client optimizer keys, gradient
    # clipping, precision, label flipping) would not reach it, and are refused
    trains_in_own_loop: ClassVar[bool] = False

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        self.params = params
        self.federation = federation

    # --- driver side ---
    def prepare_data(
        self, data: FederatedData, load_dataset: Callable[[str], ImageDataset], seed: int
    ) -> FederatedData:
        """Once, before any worker starts: the data the workers get (default: ``data``).

        An algorithm that needs server-only samples (FedVG's validation set) adds them with
        ``data.with_server_samples`` and keeps their indices; ``load_dataset(name)`` loads
        another dataset from the config's data root.
        """
        return data

    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        """Server state from the initial model (flat vector)."""
        return {"params": initial_params.clone()}

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        """What every client of the round downloads (sent once per worker)."""
        return {"params": state["params"]}

    def client_payload(self, state: ServerState, client: int) -> dict[str, Any]:
        """Per-client extras beyond the broadcast (default: none)."""
        return {}

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        round_idx: int,
    ) -> ServerState:
        """New server state from the reduced client sums (and individual uploads)."""
        return state

    def train_round(
        self, state: ServerState, context: ExchangeRound
    ) -> tuple[ServerState, RoundReport]:
        """A whole training round driven from the driver (``trains_by_exchange`` algorithms).

        Instead of one local-training call per client, the algorithm runs as many gradient
        exchanges as it needs through ``context.exchange``. It must not modify ``state`` in
        place (an interrupted round leaves the last committed state). Evaluation is the
        usual ``client_start`` path, before the round, like every algorithm's.
        """
        raise NotImplementedError(f"{self.name} trains clients locally; it has no train_round")

    def uses_client_terms(self) -> bool:
        """Whether clients train with ``ClientTerms`` (a loss term, a gradient correction): a
        model whose ``training_step`` takes no ``terms`` keyword cannot run it."""
        return False

    def evaluates(self, client: int) -> bool:
        """Whether ``client`` is evaluated in evaluation rounds (its accuracy counts in the
        round's summary). Default: every client; SP-CACW: its targets only."""
        return True

    # --- driver side, from a (final) state: no worker, no client data ---
    def client_info(self, client: int, round_idx: int) -> ClientInfo:
        """A client's ``ClientInfo`` on the driver: its data statistics, no probe."""
        return ClientInfo(
            client=client,
            num_train=int(self.federation.train_sizes[client]),
            class_counts=self.federation.class_counts[client],
            round=round_idx,
        )

    def personalized_params(
        self, state: ServerState, client_state: ClientState | None, client: ClientInfo
    ) -> torch.Tensor:
        """The parameters ``client`` evaluates with (its personalized model), flat.

        Default: what ``client_start`` plans from ``state`` and the client's private state,
        run without a probe (FedAvg: the global model). Where personalization needs the
        client's data (FedPer's fine-tune, FedFomo's re-weighting) it is the model before it.
        """
        broadcast = self.broadcast(state)
        payload = self.client_payload(state, client.client)
        plan = self.client_start(broadcast, payload, client_state, client)
        return plan.train_params if plan.eval_params is None else plan.eval_params

    def figures(
        self, state: ServerState, client_states: ClientStates, round_idx: int
    ) -> list[Figure]:
        """Figures of this algorithm's state after ``round_idx`` rounds (default: none).

        Called at the end of a run and by ``fedsim report`` on the final checkpoint; tracking
        writes each to ``<run_dir>/plots/<filename>``.
        """
        return []

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        return ClientPlan(train_params=broadcast["params"])

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        return ClientUpdate()

    def model_upload(self, client: ClientInfo) -> ModelUpload | None:
        """The model update ``client`` uploads this round (None: none; then the deployment
        options, privacy, compression, attacks and robust rules, are a config error)."""
        return None

    # --- communication accounting (the protocol's bytes, not the simulator's transport) ---
    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """Bytes a sampled client receives: the broadcast and its payload."""
        return nbytes(broadcast) + nbytes(payload)

    def upload_nbytes(self, update: ClientUpdate) -> int:
        """Bytes a client sends: each distinct tensor of its sums, and its individual upload.

        Sums that carry only a share of one uploaded tensor (cwFedAvg's per-class sums)
        override this; weights are scalars and not counted.
        """
        return nbytes([value for _, value in update.sums.values()]) + nbytes(update.individual)
