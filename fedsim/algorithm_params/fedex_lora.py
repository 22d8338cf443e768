"""FedEx-LoRA: A and B averaged, the residual of the mean of products folded into the model

``algorithm.*`` keys of ``fedsim/algorithms/fedex_lora.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own; it needs a LoRA adapter model
with a residual per adapted module (``model.args.residual=true`` of ``causal_lm``).
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
# its smallest runnable example: LoRA adapters with residuals over Shakespeare's roles
EXAMPLE = ("model.name=causal_lm", "model.args.residual=true", "data.name=shakespeare-lm")
