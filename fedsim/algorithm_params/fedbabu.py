"""FedBABU: body under a frozen random head; fine-tuned before evaluation

``algorithm.*`` keys of ``fedsim/algorithms/fedbabu.py`` (torch-free: a config is checked
without importing the algorithm). Defaults are PFLlib's (``system/main.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams, is_count
from fedsim.checks import checked


@dataclass
class FedBABUParams(AlgorithmParams):
    """``algorithm.*`` keys of FedBABU."""

    finetune_epochs: int = checked(  # epochs of whole-model fine-tuning before each evaluation
        10,
        is_count,
        "must be an integer >= 0 (0: evaluate the body with the fixed random head)",
        schedulable=True,
    )


Params = FedBABUParams
