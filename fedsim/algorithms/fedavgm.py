"""FedAvgM (Hsu et al., 2019): FedAvg with server momentum.

The pseudo-gradient d = sum_k w_k (theta - theta_k) = theta - sum_k w_k theta_k is one step
of server SGD with momentum (torch's rule): v <- beta v + d; theta <- theta - lr v, i.e.
FedAvg's server optimizer (``server_optimizer.py``) with ``algorithm.server_momentum`` 0.9
by default and ``algorithm.server_lr`` 1.0 (PFLlib's and the paper's). w_k from
``algorithm.weighting`` (n_k / sum n).
"""

from __future__ import annotations

from fedsim.algorithm_params.fedavgm import FedAvgMParams
from fedsim.algorithms.base import NewcomerRule
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.registry import register


@register
class FedAvgM(FedAvg):
    """Clients as FedAvg; the server applies the averaged update through momentum SGD."""

    name = "fedavgm"
    newcomer = NewcomerRule(
        "the global model as it is",
        "the paper's: Hsu et al. 2019: "
        "FedAvg's one global model (server momentum only changes how it is made)",
    )
    Params = FedAvgMParams
