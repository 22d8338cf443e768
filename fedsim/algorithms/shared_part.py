"""The server averages a shared part of the model; each client may keep the rest.

The base of the personalization baselines (docs/algorithms.md): FedRep and FedBABU share the
body, LG-FedAvg the top blocks, FedBN everything but the BatchNorm layers; MOON, FedRoD,
APFL, pFedMe and Per-FedAvg share the whole model and keep their personal models in their
own client state. ``OwnLoop`` is the base of those that train clients in their own per-batch
loop through the worker's probe (APFL, pFedMe, Per-FedAvg).

Server: the shared entries become ``sum_i n_i w_i / sum_i n_i`` over the clients that finished
the round (``n_i`` their training samples, PFLlib's weights); the other entries of the
server's model never change, so they stay the initial model's: a client without a personal
part of its own takes it from there, as every PFLlib client starts from a copy of the
initial model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientProbe,
    ClientState,
    ClientUpdate,
    FederationInfo,
    ModelUpload,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.sizes import nbytes
from fedsim.streams import FEDBABU_FINETUNE_KEY, LOOP_BATCHES_KEY, NEWCOMER_FINETUNE_KEY
from lightning_modules.flat_params import flat_ranges, gather, scatter


class SharedPart(Algorithm):
    """Shared entries averaged with weights n_i; a client keeps the rest (``keeps_personal``)."""

    # True: the entries that are not shared are the client's private state ("personal")
    keeps_personal: ClassVar[bool] = True

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        super().__init__(params, federation)
        layout = federation.layout
        shared = set(self.shared_names())
        names = [e.name for e in layout.entries]
        self.personal_names = [n for n in names if n not in shared]
        self.shared_ranges = flat_ranges(layout, [n for n in names if n in shared])
        self.personal_ranges = flat_ranges(layout, self.personal_names)
        self.everything_shared = not self.personal_names

    def shared_names(self) -> list[str]:
        """The entries (parameters and float buffers) the server averages (default: all)."""
        return [e.name for e in self.federation.layout.entries]

    def names_outside(self, names: list[str]) -> list[str]:
        """Every entry of the model that is not in ``names``."""
        held = set(names)
        return [e.name for e in self.federation.layout.entries if e.name not in held]

    # --- driver side ---
    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        mean = shared_mean(sums)
        if mean is None:
            return state  # nobody finished this round: keep the model
        return {**state, "params": self.with_shared(state["params"], mean)}

    def with_shared(self, params: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
        """``params`` with its shared entries replaced by ``shared`` (a new tensor)."""
        if self.everything_shared:
            return shared
        new = params.clone()
        scatter(new, self.shared_ranges, shared)
        return new

    # --- worker side ---
    def client_model(self, broadcast: dict[str, Any], state: ClientState | None) -> torch.Tensor:
        """The server's model with the client's personal entries, if it has any yet."""
        model = broadcast["params"]
        if self.keeps_personal and state is not None and self.personal_ranges:
            model = model.clone()
            scatter(model, self.personal_ranges, state["personal"])
        return model

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        return ClientPlan(train_params=self.client_model(broadcast, state))

    def shared_sums(
        self, trained: torch.Tensor, plan: ClientPlan, client: ClientInfo
    ) -> dict[str, tuple[float, torch.Tensor]]:
        """The client's shared entries, weighted by its training samples."""
        n = float(client.num_train if plan.train_indices is None else len(plan.train_indices))
        value = trained if self.everything_shared else gather(trained, self.shared_ranges)
        return {"shared": (n, value)}

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        update = ClientUpdate(sums=self.shared_sums(trained, plan, client))
        if self.keeps_personal and self.personal_ranges:
            update.state = {"personal": gather(trained, self.personal_ranges)}
        return update

    def newcomer_personal(
        self, broadcast: dict[str, Any], client: ClientInfo, finetune_epochs: int
    ) -> torch.Tensor:
        """A held-out client's model: the server's, whose personal entries are the server's
        own (never trained: the initial model's, as a client's first round starts from),
        with those entries fine-tuned on its train split for ``finetune_epochs`` epochs and
        the shared entries frozen (``finetuned``)."""
        return finetuned(broadcast["params"], client, finetune_epochs, self.shared_names())

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """The shared entries to a client that holds its personal part; the whole model to
        one that does not have it yet (its first round: the personal part starts from the
        initial model)."""
        if not (self.keeps_personal and self.personal_ranges and state is not None):
            return super().download_nbytes(broadcast, payload, state)
        params = broadcast["params"]
        shared = sum(b - a for a, b in self.shared_ranges) * params.element_size()
        rest = {k: v for k, v in broadcast.items() if k != "params"}
        return shared + nbytes(rest) + nbytes(payload)

    def model_upload(self, client: ClientInfo) -> ModelUpload | None:
        """The shared entries; the ``shared`` sum is their mean."""
        ranges = None if self.everything_shared else self.shared_ranges
        return ModelUpload(ranges=ranges, sums=("shared",))


def finetuned(
    model: torch.Tensor, client: ClientInfo, epochs: int, frozen: list[str]
) -> torch.Tensor:
    """``model`` after ``epochs`` epochs of local training on a held-out client's train split
    (its probe's extra pass, seeded by ``NEWCOMER_FINETUNE_KEY``) with ``frozen`` left as
    they are: a newcomer adapting the part of the federation's model it may change.
    ``model`` itself when ``epochs`` is 0 (no adaptation) or the pass diverged; never
    written to."""
    if epochs < 1:
        return model
    if client.probe is None:
        raise RuntimeError("a newcomer fine-tunes through the worker's probe; it has none")
    tuned, loss = client.probe.train(model, epochs=epochs, frozen=frozen, key=NEWCOMER_FINETUNE_KEY)
    return tuned if math.isfinite(loss) else model


class FineTunedBeforeTest:
    """An evaluated client is tested on its model fine-tuned (not kept) for the algorithm's
    ``finetune_epochs`` epochs on its train split, through the probe (``FEDBABU_FINETUNE_KEY``:
    one such algorithm per run); after its round's training, from the model it trained; a
    newcomer fine-tunes the whole received model (FedBABU, FedAvg-FT)."""

    params: Any

    def fine_tuned(self, model: torch.Tensor, client: ClientInfo) -> torch.Tensor:
        """``model`` after ``finetune_epochs`` epochs on the client's train split; ``model``
        itself when there are none, no probe, or the pass diverged."""
        epochs = self.round_params(client).finetune_epochs  # the round's
        if epochs > 0 and client.probe is not None:
            tuned, loss = client.probe.train(model, epochs=epochs, key=FEDBABU_FINETUNE_KEY)
            if math.isfinite(loss):
                return tuned
        return model

    def kept_params(
        self, plan: ClientPlan, trained: torch.Tensor, update: ClientUpdate, client: ClientInfo
    ) -> torch.Tensor:
        """eval.when=after_training: the evaluation's fine-tune, which waited for the round's
        training (``client.evaluates`` was False), from the model the client trained."""
        return self.fine_tuned(trained, client)

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The received model, every parameter fine-tuned on the newcomer's train split."""
        return finetuned(broadcast["params"], client, finetune_epochs, frozen=[])


def shared_mean(sums: dict[str, WeightedSum]) -> torch.Tensor | None:
    """The weighted mean of the ``shared`` sum (None: nobody contributed)."""
    total = sums.get("shared")
    if total is None or total.value is None or total.weight <= 0:
        return None
    return total.mean()


class BodyShared(SharedPart):
    """The server averages the body; the head (``federation.head_names``) is not shared
    (FedRep keeps it personal, FedBABU keeps it frozen at the initial model)."""

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        self.head_names = list(federation.head_names)
        super().__init__(params, federation)

    def shared_names(self) -> list[str]:
        return self.names_outside(self.head_names)


class OwnLoop(SharedPart):
    """Clients train in the algorithm's own per-batch loop (``client_finish``), through the
    probe's seeded minibatches and gradients, with plain SGD at ``probe.lr``; the worker's
    main pass is skipped (``ClientPlan.epochs`` 0)."""

    trains_in_own_loop = True
    LOOP_KEY: ClassVar[int] = LOOP_BATCHES_KEY  # the loop's minibatches (fedsim.streams)

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        super().__init__(params, federation)
        buffers = [n for n in federation.buffer_names if n in federation.layout.by_name]
        # True on parameter entries: terms that are not gradients (a pull, a mixture, a
        # decay) leave float buffers (BatchNorm statistics) alone
        self.param_mask = None if not buffers else ~federation.layout.mask(buffers)

    def masked(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` with the float-buffer entries zeroed (in place; returned)."""
        if self.param_mask is not None:
            values[~self.param_mask] = 0
        return values

    def epochs_of(self, plan: ClientPlan, client: ClientInfo) -> int:
        """The client's local epochs (``client.epochs`` / ``client.epochs_by_client``)."""
        return int(client.epochs)

    def epoch_batches(
        self, probe: ClientProbe, plan: ClientPlan, client: ClientInfo
    ) -> Iterator[list[np.ndarray]]:
        """Each local epoch's minibatches (seeded by seed, round, client)."""
        indices = probe.train_indices if plan.train_indices is None else plan.train_indices
        epochs = self.epochs_of(plan, client)
        batches = probe.batches(epochs, plan.train_indices, key=self.LOOP_KEY)
        per_epoch = -(-len(indices) // self.federation.batch_size)
        for epoch in range(epochs):
            yield batches[epoch * per_epoch : (epoch + 1) * per_epoch]

    def model_upload(self, client: ClientInfo) -> ModelUpload | None:
        """None: the deployment's client stages act on the worker's main pass, which an
        algorithm with its own loop does not run."""
        return None

    def needs_probe(self, client: ClientInfo) -> ClientProbe:
        if client.probe is None:
            raise RuntimeError(f"{self.name} trains through the worker's probe; it has none")
        return client.probe
