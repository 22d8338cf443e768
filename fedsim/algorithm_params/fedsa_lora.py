"""FedSA-LoRA: LoRA's A matrices shared and averaged, each client's B matrices kept

``algorithm.*`` keys of ``fedsim/algorithms/fedsa_lora.py`` (torch-free: a config is checked
without importing the algorithm). It needs a LoRA adapter model.
"""

from dataclasses import dataclass

from fedsim.algorithm_params.base import AlgorithmParams


@dataclass
class FedSALoRAParams(AlgorithmParams):
    """``algorithm.*`` keys of FedSA-LoRA."""

    # true (the official config's local_param: [lora_B, classifier]): what trains outside the
    # adapter (sequence_classifier's head) stays on the client with B; false: averaged as A is
    local_head: bool = True


Params = FedSALoRAParams
# its smallest runnable example: LoRA adapters on a pretrained LM over Shakespeare's roles
EXAMPLE = ("model.name=causal_lm", "data.name=shakespeare-lm")
# the adapter it acts on (lightning_modules/adapters.py): a plain LoRA adapter
ADAPTER = "lora"
