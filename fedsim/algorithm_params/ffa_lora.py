"""FFA-LoRA: LoRA's A frozen at its shared initialisation, only B trained and averaged

``algorithm.*`` keys of ``fedsim/algorithms/ffa_lora.py`` (torch-free: a config is checked
without importing the algorithm). It has no keys of its own; it needs a LoRA adapter model.
"""

from fedsim.algorithm_params.base import AlgorithmParams

Params = AlgorithmParams
# its smallest runnable example: LoRA adapters on a pretrained LM over Shakespeare's roles
EXAMPLE = ("model.name=causal_lm", "data.name=shakespeare-lm")
# the adapter it acts on (lightning_modules/adapters.py): a plain LoRA adapter
ADAPTER = "lora"
