"""FedEx-LoRA: A and B averaged, the residual of the mean of products folded into the model

``algorithm.*`` keys of ``fedsim/algorithms/fedex_lora.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own; it needs a LoRA adapter model
with a residual per adapted module, the adapter variant it declares (``ADAPTER``), which
fedsim asks the model to build.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
# its smallest runnable example: LoRA adapters with residuals over Shakespeare's roles
EXAMPLE = ("model.name=causal_lm", "data.name=shakespeare-lm")
# the adapter variant it needs: a dense residual per adapted module, which fedsim asks the
# model to build (lightning_modules/adapters.py)
ADAPTER = "residual"
