"""cwFedAvg: class-wise federated averaging with Weight Distribution Regularization (WDR).

Lee et al., ICCV 2025 (arXiv 2406.07800); official code regulationLee/cwFedAvg
(``servers/serveravgCW.py``, ``clients/clientavgCW.py``). Rules: docs/algorithms.md, "cwfedavg".

Server, per class j:  w_j^G = sum_i q_ij w_i,  q_ij = (n_i/N) r_ij / sum_k (n_k/N) r_kj
(N cancels; with true class proportions this is FedAvg done separately for each class).
Client, at the start of each round:  w_i = sum_j r_ij w_j^G.

Only the class-wise parameters (``classwise_layers``: the output layer, the top L blocks, or
all of them) have K class models; the rest is plain FedAvg. Each client adds its class-wise
parameters to K weighted sums ``class_j`` with weight n_i r_ij, so workers reduce before they
send and a round moves O(workers x K x class-wise size), never O(clients x model).

r_i (``class_weights``):
- ``estimated`` (default, the official code): the L2 norms of the output-layer weight rows
  (bias excluded), normalized to sum 1, read from the client's head after its last local
  training. It is the client's private state; the server never sees class counts. A client
  that has never trained uses the row norms of the initial model's head, as the official code
  does at round 0 (every client's model starts as a copy of the initial model). They are
  nearly uniform, and while all class models are still equal (round 0) r does not matter.
- ``true``: the client's empirical training class proportions p_i.

WDR adds 0.5 * lambda * ||p_i - p~_i(W)||_2 to every minibatch loss (plain L2 norm, not
squared). The seed writes lambda * R; the official code has ``loss += 0.5 * weight_decay *
wd_regularizer`` and its reported lambdas (10 MNIST/CIFAR-10, 1000 CIFAR-100, 2000 Tiny
ImageNet) were used with that 0.5, so we keep it: ``wdr_lambda`` means what it means there.

Held-out clients (``eval.holdout_clients``): a newcomer mixes the class models by its own
training class proportions p (its ``class_counts``), w = sum_j p_j w_j^G, the rest of the
model from the global part: the mix a member gets with ``class_weights=true``, and the one
WDR drives a member's estimated r toward. A newcomer has never trained, so it has no row
norms of its own, and it does not train (``eval.finetune_epochs`` and WDR do not apply).

The global model (``eval.model=global``): the class models mixed by the federation's class
proportions pi_j = sum_i n_ij / N. Since sum_j (sum_i n_i r_ij) w_j^G = sum_i n_i w_i, with
true proportions and every client sampled that is FedAvg of the round's trained models.

Figure (``row_norms.png``, the paper's heatmap): per client, the normalized output-row norms of
the model it evaluates at the end, beside its true training class proportions. With WDR the
row norms follow each client's class distribution; under FedAvg every client shows one row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedsim.algorithm_params.cwfedavg import TOP_BLOCKS, CwFedAvgParams
from fedsim.algorithms.base import (
    Algorithm,
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientStates,
    ClientUpdate,
    FederationInfo,
    ModelUpload,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.registry import register
from fedsim.errors import ConfigError
from fedsim.figures import Figure, Panel

ROW_NORMS_PNG = "row_norms.png"


def output_weight_name(federation: FederationInfo) -> str:
    """The output layer's weight: the 2-D head parameter with one row per class."""
    for name in federation.head_names:
        shape = federation.layout.by_name[name].shape
        if len(shape) == 2 and shape[0] == federation.num_classes:
            return name
    raise ConfigError(
        "algorithm.name", "cwfedavg", f"needs an output layer that is a Linear with one row "
        f"per class ({federation.num_classes}); the model's top block holds "
        f"{', '.join(federation.head_names[:4])}{' ...' if len(federation.head_names) > 4 else ''}",
    )  # fmt: skip


def estimated_proportions(weight: torch.Tensor) -> torch.Tensor:
    """p~: L2 norm of each row of the output weight (K, d), normalized to sum 1."""
    norms = torch.linalg.vector_norm(weight, dim=1)
    return norms / norms.sum()


def mean_row_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over rows of the Pearson correlation of a[i] and b[i] (constant rows count 0)."""
    values = []
    for x, y in zip(a, b, strict=True):
        sx, sy = x.std(), y.std()
        covariance = float(np.mean((x - x.mean()) * (y - y.mean())))
        values.append(0.0 if sx == 0 or sy == 0 else covariance / float(sx * sy))
    return float(np.mean(values)) if values else 0.0


def wdr_penalty(weight: torch.Tensor, proportions: torch.Tensor, wdr_lambda: float) -> torch.Tensor:
    """0.5 * lambda * ||p - p~(W)||_2, differentiable through W only."""
    return 0.5 * wdr_lambda * torch.linalg.vector_norm(proportions - estimated_proportions(weight))


@dataclass
class WDRTerms:
    """Client terms (``lightning_modules.hooks.ClientTerms``): the WDR loss on the output weight."""

    weight_name: str
    proportions: torch.Tensor  # the client's true class proportions p_i (never leave the client)
    wdr_lambda: float

    def loss(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        weight = params[self.weight_name]
        if self.proportions.device != weight.device:  # a GPU worker: move p_i once
            self.proportions = self.proportions.to(weight.device)
        return wdr_penalty(weight, self.proportions, self.wdr_lambda)

    def correct_gradients(self, params: dict[str, torch.Tensor]) -> None:
        return None


def _classwise_names(params: CwFedAvgParams, federation: FederationInfo) -> list[str]:
    if params.classwise_layers == "all":
        return [e.name for e in federation.layout.entries]
    if params.classwise_layers == "output":
        return list(federation.head_names)
    top = int(TOP_BLOCKS.fullmatch(params.classwise_layers).group(1))  # type: ignore[union-attr]
    blocks = federation.block_names
    if top > len(blocks):
        raise ConfigError(
            "algorithm.classwise_layers",
            params.classwise_layers,
            f"the model has {len(blocks)} blocks ({', '.join(blocks)}); use top-1..top-"
            f"{len(blocks)} or all",
        )
    return [n for b in blocks[-top:] for n in federation.block_parameters[b]]


@register
class CwFedAvg(Algorithm):
    """K class models for the class-wise parameters; each client mixes them by its r_i."""

    name = "cwfedavg"
    Params = CwFedAvgParams
    newcomer = NewcomerRule(
        rule="the class models mixed by its own training class proportions (sum_j p_j "
        "w_j^G), as it is",
        source="fedsim's choice: the paper's client mix w_i = sum_j r_ij w_j^G with r_i its "
        "true class proportions (class_weights=true; WDR's target); the official code's "
        "new clients (serverbase.py fine_tuning_new_clients) fine-tune its FedAvg model, "
        "which it keeps only when not every layer is class-wise",
        adapts=True,
    )
    # the FedAvg-equivalent model: the class models mixed by the federation's proportions
    has_global_model = True

    def __init__(self, params: CwFedAvgParams, federation: FederationInfo):
        super().__init__(params, federation)
        self.num_classes = federation.num_classes
        self.weight_name = output_weight_name(federation)
        names = _classwise_names(params, federation)
        self.all_layers = len(names) == len(federation.layout.entries)
        mask = federation.layout.mask(names)
        self.classwise_index = None if self.all_layers else mask.nonzero().squeeze(1)

    # --- helpers (pure functions of flat vectors) ---
    def classwise_part(self, flat: torch.Tensor) -> torch.Tensor:
        """The class-wise parameters of a flat model vector."""
        return flat if self.classwise_index is None else flat[self.classwise_index]

    def estimated_r(self, flat: torch.Tensor) -> torch.Tensor:
        """Normalized output-row norms of a flat model vector (float32, sums to 1)."""
        weight = self.federation.layout.view(flat, self.weight_name)
        return estimated_proportions(weight.detach().to(torch.float32))

    def personalize(
        self, class_models: torch.Tensor, params: torch.Tensor | None, r: torch.Tensor
    ) -> torch.Tensor:
        """w_i = sum_j r_ij w_j^G on the class-wise parameters; the rest from ``params``."""
        mixed = r.to(class_models.dtype) @ class_models
        if params is None:
            return mixed
        out = params.clone()
        out[self.classwise_index] = mixed
        return out

    def client_r(
        self, broadcast: dict[str, Any], state: ClientState | None, client: ClientInfo
    ) -> torch.Tensor:
        """The r_i a client personalizes with at the start of a round."""
        if self.params.class_weights == "true":
            return torch.as_tensor(client.class_proportions, dtype=torch.float32)
        if state is not None and "r" in state:
            return state["r"]
        return broadcast["initial_r"]

    def federation_proportions(self) -> torch.Tensor:
        """pi_j: the federation's training samples of class j over all of them (float32)."""
        counts = self.federation.class_counts.sum(axis=0).astype(np.float64)
        return torch.as_tensor(counts / max(counts.sum(), 1.0), dtype=torch.float32)

    def global_params(self, broadcast: dict[str, Any]) -> torch.Tensor:
        """The FedAvg-equivalent model: sum_j pi_j w_j^G (the rest from the global part)."""
        proportions = self.federation_proportions()
        return self.personalize(broadcast["class_models"], broadcast.get("params"), proportions)

    # --- driver side ---
    def init_state(self, initial_params: torch.Tensor) -> ServerState:
        """Round 0: every class model equals the initial model."""
        part = self.classwise_part(initial_params)
        state: ServerState = {
            "class_models": part.unsqueeze(0).repeat(self.num_classes, 1),
            "initial_r": self.estimated_r(initial_params),
        }
        if not self.all_layers:
            state["params"] = initial_params.clone()
        return state

    def broadcast(self, state: ServerState) -> dict[str, Any]:
        return dict(state)

    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        """Per class j: sum_i n_i r_ij w_i / sum_i n_i r_ij; unchanged where nobody holds j."""
        class_models = state["class_models"].clone()
        for j in range(self.num_classes):
            total = sums.get(f"class_{j}")
            if total is not None and total.weight > 0:
                class_models[j] = total.mean()
        new_state = {**state, "class_models": class_models}
        fedavg = sums.get("params")
        if not self.all_layers and fedavg is not None and fedavg.weight > 0:
            new_state["params"] = fedavg.mean()
        return new_state

    def upload_nbytes(self, update: ClientUpdate) -> int:
        """The trained model once and r_i: the per-class sums are shares of that upload."""
        return 4 * (self.federation.layout.total + self.federation.num_classes)

    # --- driver side, from a (final) state ---
    def personalized_params(
        self, state: ServerState, client_state: ClientState | None, client: ClientInfo
    ) -> torch.Tensor:
        """w_i = sum_j r_ij w_j^G (what ``client_start`` plans, without building a payload)."""
        r = self.client_r(state, client_state, client)
        return self.personalize(state["class_models"], state.get("params"), r)

    def evaluated_row_norms(
        self, state: ServerState, client_states: ClientStates, round_idx: int
    ) -> np.ndarray:
        """(clients, K): normalized output-row norms of the model each client evaluates."""
        rows = []
        for client in range(self.federation.num_clients):
            info = self.client_info(client, round_idx)
            params = self.personalized_params(state, client_states.get(client), info)
            weight = self.federation.layout.view(params, self.weight_name).float()
            norms = torch.linalg.vector_norm(weight, dim=1)
            rows.append((norms / norms.sum()).numpy())
        return np.stack(rows)

    def figures(
        self, state: ServerState, client_states: ClientStates, round_idx: int
    ) -> list[Figure]:
        """The row-norm heatmap beside the true class proportions (``row_norms.png``)."""
        norms = self.evaluated_row_norms(state, client_states, round_idx)
        counts = self.federation.class_counts.astype(np.float64)
        proportions = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        correlation = mean_row_correlation(norms, proportions)
        panels = (
            Panel(norms, "output-row norms (normalized)", "class", "client"),
            Panel(proportions, "class proportions p_i (train)", "class", "client"),
        )
        return [Figure(ROW_NORMS_PNG, f"mean per-client corr = {correlation:.3f}", panels)]

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        r = self.client_r(broadcast, state, client)
        personalized = self.personalize(broadcast["class_models"], broadcast.get("params"), r)
        terms = None
        wdr_lambda = self.round_params(client).wdr_lambda  # the round's
        if wdr_lambda > 0:
            proportions = torch.as_tensor(client.class_proportions, dtype=torch.float32)
            terms = WDRTerms(self.weight_name, proportions, wdr_lambda)
        return ClientPlan(train_params=personalized, terms=terms)

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """Add the trained class-wise parameters to class j's sum with weight n_i r_ij."""
        estimated = self.estimated_r(trained)
        if self.params.class_weights == "true":
            r = torch.as_tensor(client.class_proportions, dtype=torch.float32)
        else:
            r = estimated
        part = self.classwise_part(trained)
        sums: dict[str, tuple[float, torch.Tensor]] = {}
        for j, r_j in enumerate(r.tolist()):
            if r_j > 0:
                sums[f"class_{j}"] = (client.num_train * r_j, part)
        if not self.all_layers:
            sums["params"] = (float(client.num_train), trained)
        return ClientUpdate(sums=sums, state={"r": estimated})

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """w = sum_j p_j w_j^G with p the newcomer's own training class proportions."""
        proportions = torch.as_tensor(client.class_proportions, dtype=torch.float32)
        return self.personalize(broadcast["class_models"], broadcast.get("params"), proportions)

    def model_upload(self, client: ClientInfo) -> ModelUpload:
        """The trained model; no sum is a plain mean of it (class sums weigh it by r_ij)."""
        return ModelUpload()
