"""FedNova: normalized averaging for unequal local steps

``algorithm.*`` keys of ``fedsim/algorithms/fednova.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
