"""The server optimizer's keys (Reddi et al. 2021), which
``fedsim/algorithms/server_optimizer.py`` acts on.

A shared base, not an algorithm (it has no ``Params``): FedAvg and SCAFFOLD subclass it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams
from fedsim.checks import checked
from fedsim.errors import ConfigError

SERVER_OPTIMIZERS = ("sgd", "adagrad", "yogi", "adam")
ADAPTIVE_DEFAULTS = {"beta1": 0.9, "beta2": 0.99, "tau": 1e-3}


@dataclass
class AdaptiveServerParams(AlgorithmParams):
    """The server optimizer's kind and its adaptive moments' keys (Reddi et al. 2021)."""

    server_optimizer: str = checked(  # sgd (FedAvg, FedAvgM) | adagrad | yogi | adam (FedOpt)
        "sgd", lambda v: v in SERVER_OPTIMIZERS, f"allowed: {', '.join(SERVER_OPTIMIZERS)}"
    )
    beta1: float = checked(  # adaptive server optimizers: first-moment decay
        0.9, lambda v: 0 <= v < 1, "must be in [0, 1)", schedulable=True
    )
    beta2: float = checked(  # yogi / adam: second-moment decay
        0.99, lambda v: 0 <= v < 1, "must be in [0, 1)", schedulable=True
    )
    tau: float = checked(  # adaptive server optimizers: adaptivity (the paper's epsilon)
        1e-3, lambda v: v > 0, "must be > 0", schedulable=True
    )

    def __post_init__(self) -> None:
        if self.server_optimizer == "sgd":
            for key in ("beta1", "beta2", "tau"):
                if getattr(self, key) != ADAPTIVE_DEFAULTS[key]:
                    raise ConfigError(
                        f"algorithm.{key}",
                        getattr(self, key),
                        "acts only with algorithm.server_optimizer=adagrad|yogi|adam, and this "
                        "run has algorithm.server_optimizer='sgd'",
                    )
        elif self.server_optimizer == "adagrad" and self.beta2 != ADAPTIVE_DEFAULTS["beta2"]:
            raise ConfigError(
                "algorithm.beta2", self.beta2, "adagrad has no second-moment decay (yogi, adam)"
            )
