"""FedBN: FedAvg that keeps every BatchNorm layer on its client.

Li et al., "FedBN: Federated Learning on Non-IID Features via Local Batch Normalization",
ICLR 2021; PFLlib ``servers/serverbn.py``, ``clients/clientbn.py``. Rules:
docs/algorithms.md, "fedbn". Every entry outside the BatchNorm layers is averaged with n_i
weights; each client keeps its BatchNorm weights and biases and its running statistics
(private state; a client without them starts from the initial model's). Needs a model with
BatchNorm (``fedavg_cnn_bn``, ``resnet18``); the layers are found by type, not by name.
"""

from __future__ import annotations

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.algorithms.base import FederationInfo
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.errors import ConfigError


@register
class FedBN(SharedPart):
    """Everything but BatchNorm averaged; BatchNorm parameters and statistics stay local."""

    name = "fedbn"
    Params = AlgorithmParams

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
