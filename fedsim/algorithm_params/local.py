"""Local-only: every client trains alone, no communication

``algorithm.*`` keys of ``fedsim/algorithms/local.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
