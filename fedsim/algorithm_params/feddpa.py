"""FedDPA: a global LoRA adapter averaged, a personal one kept, mixed per instance at inference

``algorithm.*`` keys of ``fedsim/algorithms/feddpa.py`` (torch-free: a config is checked
without importing the algorithm). Needs an adapter model (``model.name=causal_lm``), which
fedsim builds with the second adapter this algorithm declares (``ADAPTER``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams, is_positive_count
from fedsim.checks import checked

# the smallest runnable example: an adapter model with its second (personal) adapter
EXAMPLE = ("model.name=causal_lm",)
FEDDPA_WEIGHTINGS = ("uniform", "samples")
# the adapter variant it needs: a second (personal) adapter beside the first, which fedsim
# asks the model to build (lightning_modules/adapters.py)
ADAPTER = "personal"


@dataclass
class FedDPAParams(AlgorithmParams):
    """``algorithm.*`` keys of FedDPA (FedDPA-T: the two adapters trained in turn each round)."""

    local_weight: float = checked(  # a: the personal adapter's scale in its pass (global: 1 - a)
        0.5, lambda v: 0 < v <= 1, "must be in (0, 1]"
    )
    max_weight: float = checked(  # w: the global adapter's scale at inference is w x similarity
        0.5, lambda v: 0 <= v <= 1, "must be in [0, 1]"
    )
    dynamic: bool = True  # false: fixed scales at inference, w global and 1 - w personal
    reference_samples: int = checked(  # training instances the similarity is measured against
        5, is_positive_count, "must be an integer >= 1"
    )
    personal_epochs: int = checked(  # epochs of the personal adapter's pass each round
        1, is_positive_count, "must be an integer >= 1"
    )
    # how the server weights the global adapters: uniform (the official code; its n-weighted
    # line is commented out) | samples (n_i, FedAvg's)
    weighting: str = checked(
        "uniform", lambda v: v in FEDDPA_WEIGHTINGS, f"allowed: {', '.join(FEDDPA_WEIGHTINGS)}"
    )
    # the share of an instance's tokens (a prefix) its mixing weight is computed from: 0.5 the
    # first half of a next-token window (the official code: the prompt only); 1.0 the whole
    # window, the tokens it then scores included (fedsim's earlier choice)
    prompt_fraction: float = checked(0.5, lambda v: 0 < v <= 1, "must be in (0, 1]")
    # a client that skipped the previous round starts its personal pass from the initial
    # personal adapter (the official code resets it); false: from the one it kept
    reset_after_skip: bool = True


Params = FedDPAParams
