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
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithms.seam import (  # re-exported: the seam's names live here for users
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientStates,
    ClientUpdate,
    ExchangeRound,
    FederationInfo,
    ModelUpload,
    NewcomerRule,
    RoundReport,
    ServerState,
)
from fedsim.algorithms.sums import WeightedSum
from fedsim.figures import Figure
from fedsim.round_context import RoundContext, static_context
from fedsim.sizes import nbytes

if TYPE_CHECKING:
    from fedsim.data.datasets import ImageDataset
    from fedsim.data.federated import FederatedData

__all__ = [
    "Algorithm",
    "ClientInfo",
    "ClientPlan",
    "ClientProbe",
    "ClientState",
    "ClientStates",
    "ClientUpdate",
    "ExchangeRound",
    "FederationInfo",
    "ModelUpload",
    "NewcomerRule",
    "RoundContext",
    "RoundReport",
    "ServerState",
    "WeightedSum",
]


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
    # True: the algorithm's math counts a client's local steps from its epochs (FedNova's
    # tau); client.steps and client.grad_accumulation are then refused
    counts_local_epochs: ClassVar[bool] = False

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        self.params = params
        self.federation = federation

    def context(self, round_idx: int) -> RoundContext:
        """Round ``round_idx`` with nothing scheduled (the params as built): what a unit test
        or a finished run's figures hand the methods that take a round's context. A run's
        rounds get theirs from the run plan."""
        return static_context(round_idx, self.params)

    def round_params(self, client: ClientInfo) -> AlgorithmParams:
        """The params of ``client``'s round: a key given as a schedule has its value of the
        round (``client.context``, from the run plan); a ``ClientInfo`` built without a
        context (a unit test's) has nothing scheduled: the params as built."""
        return self.params if client.context is None else client.context.algorithm_params

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
        context: RoundContext,
    ) -> ServerState:
        """New server state from the reduced client sums (and individual uploads); a key
        given as a schedule is read from ``context.algorithm_params``."""
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

    # what the algorithm calls on the model beyond forward(x) -> logits and training_step
    # (MOON and FedRoD: ``features(x)``, the input of the output layer); a model without one
    # is refused when the run is built, naming the method to add
    model_needs: ClassVar[tuple[str, ...]] = ()
    # the loss clients train on in place of the module's ``training_step`` (its terms'
    # ``objective``), in words for the one-line note a user's own training_step gets; "": none
    own_objective: ClassVar[str] = ""

    def evaluates(self, client: int) -> bool:
        """Whether ``client`` is evaluated in evaluation rounds (its accuracy counts in the
        round's summary). Default: every client; SP-CACW: its targets only."""
        return True

    # --- driver side, from a (final) state: no worker, no client data ---
    def client_info(
        self,
        client: int,
        round_idx: int,
        *,
        num_train: int | None = None,
        class_counts: np.ndarray | None = None,
        probe: ClientProbe | None = None,
        evaluates: bool = True,
        trains: bool = True,
        epochs: int = 1,
        context: RoundContext | None = None,
    ) -> ClientInfo:
        """A client's ``ClientInfo``, the one place it is built: its data statistics from the
        federation (on the driver: no probe, nobody trained), or as the worker gives them
        (a held-out client's, an attacker's as its stages make them look), with what only
        the worker knows (its probe, whether it evaluates and trains, its epochs, the round's
        ``context``)."""
        return ClientInfo(
            client=client,
            num_train=int(self.federation.train_sizes[client] if num_train is None else num_train),
            class_counts=self.federation.class_counts[client] if class_counts is None
            else class_counts,
            round=round_idx,
            probe=probe,
            evaluates=evaluates,
            trains=trains,
            epochs=epochs,
            context=self.context(round_idx) if context is None else context,
        )  # fmt: skip

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

    # --- held-out clients (eval.holdout_clients) and the global model (eval.model) ---
    # how a client that never trained is served: declared by every algorithm in its own
    # file (docs/algorithms.md lists them); the default is the global model as it is
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        "the global model as it is", "one model serves every client"
    )
    # whether ``global_params`` is one model any client could use (eval.model=global|both)
    has_global_model: ClassVar[bool] = True

    def newcomer_payload(self, state: ServerState) -> dict[str, Any]:
        """What a held-out client downloads beside the broadcast (default: none)."""
        return {}

    def global_params(self, broadcast: dict[str, Any]) -> torch.Tensor:
        """The federation's global model from the round's broadcast (``has_global_model``)."""
        return broadcast["params"]

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

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The parameters a held-out client evaluates with, by the ``newcomer`` rule
        (``client.probe`` on its own data; ``finetune_epochs``: eval.finetune_epochs). It
        keeps nothing: the federation never sees what a newcomer did. Default: the global
        model (a refused rule raises; the config check stops such a run before)."""
        if self.newcomer.refused:
            raise ValueError(self.newcomer.refused)
        return self.global_params(broadcast)

    def kept_params(
        self,
        plan: ClientPlan,
        trained: torch.Tensor,
        update: ClientUpdate,
        client: ClientInfo,
    ) -> torch.Tensor:
        """The model a client keeps after its round's training (eval.when=after_training):
        default the main pass's result (before any upload step); an algorithm whose client
        keeps another model (Ditto's personal one) says which."""
        return trained

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
