"""Oracle: FedAvg within each true cluster (needs a clustered partition)

``algorithm.*`` keys of ``fedsim/algorithms/oracle.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
