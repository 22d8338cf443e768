"""FedBN: FedAvg that keeps every BatchNorm layer on its client.

Li et al., "FedBN: Federated Learning on Non-IID Features via Local Batch Normalization",
ICLR 2021; PFLlib ``servers/serverbn.py``, ``clients/clientbn.py``. Rules:
docs/algorithms.md, "fedbn". Every entry outside the BatchNorm layers is averaged with n_i
weights; each client keeps its BatchNorm weights and biases and its running statistics
(private state; a client without them starts from the initial model's). Needs a model with
BatchNorm (``fedavg_cnn_bn``, ``resnet18``); the layers are found by type, not by name.

A held-out client (``eval.holdout_clients``) adapts BatchNorm layers of its own under the
averaged weights: the server's (the initial model's, never trained) trained for
``eval.finetune_epochs`` epochs on its train split, everything else frozen; their running
statistics follow its data. The server's model is no global model: its BatchNorm layers never
train.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithms.base import ClientInfo, FederationInfo, NewcomerRule
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.errors import ConfigError


@register
class FedBN(SharedPart):
    """Everything but BatchNorm averaged; BatchNorm parameters and statistics stay local."""

    name = "fedbn"
    Params = AlgorithmParams
    newcomer: ClassVar[NewcomerRule] = NewcomerRule(
        rule="the averaged weights with the server's (initial) BatchNorm layers trained for "
        "eval.finetune_epochs epochs on its own train split (their statistics too), the "
        "rest frozen",
        source="fedsim's choice: the rule of the personal-part family, whose personal part "
        "here is the BatchNorm layers (Li et al. 2021 keep them on the client)",
        adapts=True,
    )
    has_global_model: ClassVar[bool] = False  # the server's BatchNorm layers never train

    def __init__(self, params: AlgorithmParams, federation: FederationInfo):
        if not federation.batchnorm_names:
            raise ConfigError(
                "algorithm.name",
                "fedbn",
                "keeps the BatchNorm layers local and the model has none (it would be fedavg): "
                "use model.name=fedavg_cnn_bn or resnet18",
            )
        super().__init__(params, federation)

    def shared_names(self) -> list[str]:
        return self.names_outside(self.federation.batchnorm_names)

    def newcomer_params(
        self,
        broadcast: dict[str, Any],
        payload: dict[str, Any],
        client: ClientInfo,
        finetune_epochs: int,
    ) -> torch.Tensor:
        """The server's BatchNorm layers trained under the averaged weights (frozen)."""
        return self.newcomer_personal(broadcast, client, finetune_epochs)
