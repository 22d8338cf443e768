"""LG-FedAvg: local representations, a global head: the mirror of FedPer.

Liang et al., "Think Locally, Act Globally: Federated Learning with Local and Global
Representations", 2020; PFLlib ``servers/serverlg.py``, ``clients/clientlg.py``. Rules:
docs/algorithms.md, "lgfedavg". The top ``global_layers`` named blocks (1: the output layer,
as PFLlib) are shared and averaged with n_i weights; every block below stays on its client
(its private state; a client without one starts from the initial model's). Clients train the
whole model and are evaluated with their own lower blocks under the received global head.
"""

from __future__ import annotations

from fedsim.algorithm_params.lgfedavg import LGFedAvgParams
from fedsim.algorithms.base import FederationInfo
from fedsim.algorithms.registry import register
from fedsim.algorithms.shared_part import SharedPart
from fedsim.errors import ConfigError


@register
class LGFedAvg(SharedPart):
    """The top blocks averaged; each client keeps the blocks below."""

    name = "lgfedavg"
    Params = LGFedAvgParams

    def __init__(self, params: LGFedAvgParams, federation: FederationInfo):
        blocks = federation.block_names
        if params.global_layers > len(blocks):
            raise ConfigError(
                "algorithm.global_layers",
                params.global_layers,
                f"the model has {len(blocks)} blocks: must be in 1..{len(blocks)}",
            )
        top = blocks[len(blocks) - params.global_layers :]
        self.global_names = [n for b in top for n in federation.block_parameters[b]]
        super().__init__(params, federation)

    def shared_names(self) -> list[str]:
        return self.global_names
