"""One file per algorithm; importing this package imports (and so registers) every file."""

import importlib
import pkgutil

from fedsim.algorithm_params import PARAMS
from fedsim.algorithms.base import Algorithm, ClientInfo, ClientPlan, ClientUpdate, WeightedSum
from fedsim.algorithms.registry import ALGORITHMS, get_algorithm_class, register

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")

for _name in PARAMS:  # every discovered params module has its algorithm
    if _name not in ALGORITHMS:
        raise ImportError(
            f"fedsim/algorithm_params/{_name}.py declares keys, but no class in "
            f"fedsim/algorithms/{_name}.py is registered as {_name!r}"
        )

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
