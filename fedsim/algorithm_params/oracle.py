"""Oracle: FedAvg within each true cluster (needs a clustered partition)

``algorithm.*`` keys of ``fedsim/algorithms/oracle.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
# its smallest runnable example beside algorithm.name (the true clusters come from a
# clustered partition); every test and the docs generator read it (algorithm_params.example)
EXAMPLE = ("data.partition.name=relabel",)
