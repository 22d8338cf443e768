"""FedRoD: generic head on balanced softmax + a personal head

``algorithm.*`` keys of ``fedsim/algorithms/fedrod.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
