"""cwFedAvg (+ WDR): class-wise models mixed per client by its class weights

``algorithm.*`` keys of ``fedsim/algorithms/cwfedavg.py`` (torch-free: a config is checked
without importing the algorithm).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked
from fedsim.errors import ConfigError

CLASS_WEIGHTS = ("estimated", "true")  # cwFedAvg: r_i from the head's row norms | the counts
TOP_BLOCKS = re.compile(r"top-([1-9][0-9]*)")  # cwFedAvg classwise_layers=top-L


@dataclass
class CwFedAvgParams(AlgorithmParams):
    """``algorithm.*`` keys of cwFedAvg."""

    # estimated (head row norms) | true (class proportions). Typed Any because YAML and the
    # CLI read a bare `true` as a boolean; __post_init__ turns it back into "true".
    class_weights: Any = "estimated"
    classwise_layers: str = "output"  # output | all | top-L (the top L blocks)
    wdr_lambda: float = checked(  # WDR strength; loss += 0.5 * lambda * ||p - p~||_2; 0 disables
        10.0, lambda v: v >= 0, "must be >= 0 (0: no WDR)", schedulable=True
    )

    def __post_init__(self) -> None:
        if self.class_weights is True:
            self.class_weights = "true"
        if not isinstance(self.class_weights, str) or self.class_weights not in CLASS_WEIGHTS:
            raise ConfigError(
                "algorithm.class_weights", self.class_weights, "allowed: estimated, true"
            )
        if self.classwise_layers not in ("output", "all") and not TOP_BLOCKS.fullmatch(
            self.classwise_layers
        ):
            raise ConfigError(
                "algorithm.classwise_layers",
                self.classwise_layers,
                "allowed: output, all, top-L (L >= 1 top blocks, e.g. top-2)",
            )


Params = CwFedAvgParams
