"""FedSA-LoRA: the A matrices of a LoRA adapter shared and averaged, the B matrices personal.

Guo et al., "Selective Aggregation for Low-Rank Adaptation in Federated Learning", ICLR 2025.
Rules: docs/algorithms.md, "fedsa_lora". The paper finds that A learns what is common to the
clients and B what is specific to each: so each round a client trains its whole adapter (A and
B) from the server's A and its own B, uploads A only, and the server averages the A's with
weights n_i / sum n (FedAvg's). B is the client's private state (in the client-state store,
as FedPer's personal layers); a client that has none yet takes the server's B, which is the
initial adapter's (peft starts B at zero: the adapter's product is then zero, and the model is
the pretrained one). Anything else trainable in the model (``sequence_classifier``'s head)
stays on the client with B (``local_head: true``, the official config's
``local_param: [lora_B, classifier]``), or is shared and averaged as A is
(``local_head: false``, as FedAvg would).

A held-out client gets the shared A with the server's (initial) B, its B fine-tuned for
``eval.finetune_epochs`` epochs on its own train split with A frozen: the server never
receives a B, so there is no average B to give it, and B is the part the paper makes
client-specific.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedsim.algorithm_params.fedsa_lora import Params as FedSALoRAParams
from fedsim.algorithms.base import ClientInfo, FederationInfo, NewcomerRule
from fedsim.algorithms.lora_parts import a_names, b_names, require_lora
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart


@register
class FedSALoRA(SharedPart):
    """A (and any head) averaged on the server (n_i weights); each client keeps its B."""

    name = "fedsa_lora"
    Params = FedSALoRAParams
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the shared A with the server's (initial) B (and head, local_head: true), B "
        "fine-tuned for eval.finetune_epochs epochs on its own train split, A frozen",
        source="fedsim's choice: the server never receives a B (no average B exists), and B "
        "is the part the paper makes client-specific; a client's first round starts so",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = False  # the server's B never trains

    def __init__(self, params: FedSALoRAParams, federation: FederationInfo):
        self.modules = require_lora(federation, self.name)
        super().__init__(params, federation)

    def shared_names(self) -> list[str]:
        """A, and (``local_head: false``) what trains outside the adapter (a head)."""
        if not self.params.local_head:
            return self.names_outside(b_names(self.modules))
        return a_names(self.modules)

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The shared A under the server's B, B fine-tuned on the newcomer's data (A frozen)."""
        return self.newcomer_personal(broadcast, client, finetune_epochs)
