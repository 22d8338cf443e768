"""FFA-LoRA: a LoRA adapter's A frozen at its initialisation, only B trained and averaged.

Sun et al., "Improving LoRA in Privacy-preserving Federated Learning", ICLR 2024. Rules:
docs/algorithms.md, "ffa_lora". A stays at its seeded random initialisation, the same on every
client (every client starts from the server's initial adapter), and never trains
(``ClientPlan.frozen``: it comes back from training unchanged, to the bit); a client trains B
(peft starts it at zero) and uploads B only; the server averages the B's with weights
n_i / sum n. Since every client's A is the same A, the average of the products is the
product of the averages, ``mean_i(B_i A) = mean(B) A``: the aggregation is exact, where
FedAvg's ``mean(B) mean(A)`` is not. Anything else trainable in the model (a classifier's
head) trains and is averaged as B is, as FedAvg would.

Bytes: B each way. A is never sent: the paper's clients draw it from a seed they share (in
fedsim it is in the initial model every client starts from).

A held-out client gets the global adapter as it is (the shared A and the averaged B): one
adapter serves every client.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fedsim.algorithm_params.ffa_lora import Params as FFALoRAParams
from fedsim.algorithms.base import (
    ClientInfo,
    ClientPlan,
    ClientState,
    FederationInfo,
    NewcomerRule,
)
from fedsim.algorithms.lora_parts import a_names, require_lora
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.sizes import nbytes


@register
class FFALoRA(SharedPart):
    """B averaged on the server (n_i weights); A frozen at the shared initial A."""

    name = "ffa_lora"
    Params = FFALoRAParams
    keeps_personal: ClassVar[bool] = False  # A is the server's (initial) A on every client
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        "the global adapter as it is (the shared initial A, the averaged B)",
        "one adapter serves every client (the paper trains one global adapter)",
    )

    def __init__(self, params: FFALoRAParams, federation: FederationInfo):
        self.modules = require_lora(federation, self.name)
        super().__init__(params, federation)

    def shared_names(self) -> list[str]:
        """Every entry but the A matrices (B, and a trained head where the model has one)."""
        return self.names_outside(a_names(self.modules))

    def client_start(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        state: ClientState | None,
        client: ClientInfo,
    ) -> ClientPlan:
        """The global adapter; A frozen in training."""
        return ClientPlan(train_params=broadcast["params"], frozen=self.personal_names)

    def download_nbytes(
        self, broadcast: dict[str, Any], payload: dict[str, Any], state: ClientState | None
    ) -> int:
        """B (and any head) only: A comes from the seed every client shares, never over the
        network."""
        params = broadcast["params"]
        shared = sum(b - a for a, b in self.shared_ranges) * params.element_size()
        rest = {k: v for k, v in broadcast.items() if k != "params"}
        return shared + nbytes(rest) + nbytes(payload)
