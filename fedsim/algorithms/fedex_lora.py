"""FedEx-LoRA: exact aggregation of LoRA adapters, the residual folded into the frozen weights.

Singhal, Ponkshe and Vepakomma, "FedEx-LoRA: Exact Aggregation for Federated and Efficient
Fine-Tuning of Foundation Models", ACL 2025. Rules: docs/algorithms.md, "fedex_lora". Averaging
A and B separately (FedAvg on adapters) gives the update ``mean(B) mean(A)``, not the mean of
the clients' updates ``mean_i(B_i A_i)``. Each round the server averages A and B with weights
n_i / sum n, as FedAvg does, and adds the difference

    R += mean_i(B_i A_i) - mean(B) mean(A)        (same weights n_i, per adapted module)

to the module's frozen weight, so the aggregated model's update ``s (R + mean(B) mean(A))`` is
the clients' mean update ``mean_i s (R + B_i A_i)`` exactly (s = alpha / r, peft's scaling of
the product; R is kept in B A's units and scaled by the model). The frozen base is shared by
every module of a worker process, so R is not written into it: each adapted module has a
dense residual of its own (``lightning_modules/lora_residual.py``: the ``residual`` adapter
variant this algorithm declares, which fedsim asks the model to build), a part of the flat
vector that clients receive, never train (frozen) and never upload. A model without one is
refused in one line. Anything else trainable in the model (a classifier's
head) is averaged as A and B are.

Bytes: down, the adapter and every residual (out x in per adapted module, dense); up, A and B.
The products B_i A_i are the server's computation from the uploaded A_i, B_i: the simulator's
workers reduce them as a weighted sum beside the adapters (so a round moves one sum per worker,
not every client's adapter), which the protocol's bytes do not count.

A held-out client gets the global model as it is (the averaged adapter on the residual).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedsim.algorithm_params.fedex_lora import Params as FedExLoRAParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    ClientUpdate,
    FederationInfo,
    ModelUpload,
    NewcomerRule,
    RoundContext,
    ServerState,
    WeightedSum,
)
from fedsim.algorithms.lora_parts import require_lora, residual_names
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.errors import ConfigError
from fedsim.sizes import nbytes


@register
class FedExLoRA(SharedPart):
    """A and B averaged (n_i weights); the residual of the products folded into the model."""

    name = "fedex_lora"
    Params = FedExLoRAParams
    keeps_personal: ClassVar[bool] = False  # every client takes the server's model
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        "the global model as it is (the averaged adapter on the folded residuals)",
        "one model serves every client (the paper trains one global adapter)",
    )

    def __init__(self, params: FedExLoRAParams, federation: FederationInfo):
        self.modules = require_lora(federation, self.name)
        if any(m.residual is None for m in self.modules):
            raise ConfigError(
                "model.name", federation.adapters.variant, f"algorithm.name={self.name} "
                "folds each round's residual into a dense term per adapted module, and the "
                "model declares none: build it with the residual adapter variant (causal_lm "
                "and sequence_classifier do, as this algorithm asks)",
            )  # fmt: skip
        super().__init__(params, federation)
        by_name = federation.layout.by_name
        # each module's B A, flattened, one after the other: the "products" sum ([start, stop)
        # pairs: a checkpoint holds the algorithm, and loads plain values only)
        self.product_ranges: list[tuple[int, int]] = []
        offset = 0
        for m in self.modules:
            size = by_name[m.b].shape[0] * by_name[m.a].shape[1]
            self.product_ranges.append((offset, offset + size))
            offset += size

    def shared_names(self) -> list[str]:
        """Every entry but the residuals (A, B, and a trained head where the model has one)."""
        return self.names_outside(residual_names(self.modules))

    def products(self, params: torch.Tensor) -> torch.Tensor:
        """Every adapted module's B A of the flat ``params``, flattened, one after the other."""
        layout = self.federation.layout
        return torch.cat([
            (layout.view(params, m.b) @ layout.view(params, m.a)).reshape(-1)
            for m in self.modules
        ])  # fmt: skip

    # --- driver side ---
    def aggregate(
        self,
        state: ServerState,
        sums: dict[str, WeightedSum],
        individual: dict[int, Any],
        context: RoundContext,
    ) -> ServerState:
        """A and B: their weighted means; each residual: plus the mean of the products minus
        the product of those (float32) means, computed in float64."""
        new = super().aggregate(state, sums, individual, context)
        total = sums.get("products")
        if new is state or total is None or total.value is None or total.weight <= 0:
            return state
        params, layout = new["params"], self.federation.layout
        mean_products = total.value / total.weight
        for m, (start, stop) in zip(self.modules, self.product_ranges, strict=True):
            folded = layout.view(params, m.b).double() @ layout.view(params, m.a).double()
            residual = layout.view(params, m.residual)
            gap = mean_products[start:stop].view(residual.shape) - folded
            residual.copy_((residual.double() + gap).float())
        return new

    # --- worker side ---
    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """The global model; the residuals frozen."""
        return ClientPlan(train_params=broadcast["params"], frozen=self.personal_names)

    def client_finish(
        self, plan: ClientPlan, trained: torch.Tensor, state: ClientState | None, client: ClientInfo
    ) -> ClientUpdate:
        """A and B, and (for the server's residual) every module's B_i A_i, weighted by n_i."""
        update = super().client_finish(plan, trained, state, client)
        weight, _ = update.sums["shared"]
        update.sums["products"] = (weight, self.products(trained))
        return update

    # --- communication ---
    def upload_nbytes(self, update: ClientUpdate) -> int:
        """A and B: the products are the server's computation from them."""
        return nbytes([update.sums["shared"][1]])

    def model_upload(self, client: ClientInfo) -> ModelUpload:
        """A and B; no sum is a plain mean a robust rule or central noise could replace (the
        residual is computed from the same uploads, so it must see the means as they are)."""
        return ModelUpload(ranges=self.shared_ranges, sums=())
