"""FedAvg-FT: FedAvg's global model, fine-tuned on each client's own data before its test

``algorithm.*`` keys of ``fedsim/algorithms/fedavg_ft.py`` (torch-free: a config is checked
without importing the algorithm): FedAvg's keys and the fine-tune's epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import is_count
from fedsim.algorithm_params.fedavg import FedAvgParams
from fedsim.checks import checked


@dataclass
class FedAvgFTParams(FedAvgParams):
    """``algorithm.*`` keys of FedAvg-FT: ``finetune_epochs`` and FedAvg's keys."""

    finetune_epochs: int = checked(  # epochs of local fine-tuning before each evaluation
        1, is_count, "must be an integer >= 0 (0: FedAvg's global model as it is)",
        schedulable=True,
    )  # fmt: skip


Params = FedAvgFTParams
