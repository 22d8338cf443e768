"""FedBN: FedAvg that keeps every BatchNorm layer local (needs a BN model)

``algorithm.*`` keys of ``fedsim/algorithms/fedbn.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
