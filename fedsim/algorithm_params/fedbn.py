"""FedBN: FedAvg that keeps every BatchNorm layer local (needs a BN model)

``algorithm.*`` keys of ``fedsim/algorithms/fedbn.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
# its smallest runnable example beside algorithm.name (it keeps BatchNorm layers local: a
# model that has them); every test and the docs generator read it (algorithm_params.example)
EXAMPLE = ("model.name=fedavg_cnn_bn",)
