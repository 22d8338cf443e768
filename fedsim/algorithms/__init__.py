"""One file per algorithm; importing this package registers them all."""

from fedsim.algorithms import fedavg, local  # noqa: F401
from fedsim.algorithms.base import Algorithm, ClientInfo, ClientPlan, ClientUpdate, WeightedSum
from fedsim.algorithms.registry import ALGORITHMS, get_algorithm_class, register

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "ClientInfo",
    "ClientPlan",
    "ClientUpdate",
    "WeightedSum",
    "get_algorithm_class",
    "register",
]
