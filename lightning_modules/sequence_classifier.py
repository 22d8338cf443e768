"""SequenceClassifier: a pretrained language model's body with a LoRA adapter (peft) and a
classification head; the adapter and the head train and travel, the base stays frozen.

The body is the frozen causal LM of ``model.args.source`` (loaded once per process by
``fedsim/pretrained.py``, shared with every other module built on it) without its language
modelling head. A sequence is represented by the hidden state of its last real token (the
tokens are padded on the right, -1; ``fedsim/data/hf/text.py``), as transformers' own
``*ForSequenceClassification`` models do, and a ``Linear`` head maps it to the classes of
``data.label_column``. The flat vector (``frozen_base``) is the adapter, then the head; the
blocks are the transformer layers that hold adapter weights, bottom to top, then the head,
so FedPer's top block and FedRep's head are the classifier. The adapter and the variant an
algorithm asks for are built by ``adapters.py``, as ``causal_lm``'s are.
"""

from __future__ import annotations

from typing import Any

import torch

from fedsim.errors import ConfigError
from fedsim.pretrained import SMOLLM2, adapter_ready, load_frozen_base, shared_copy
from lightning_modules.adapters import (
    SOURCE_KEY,
    AdapterParts,
    adapter_blocks,
    adapter_parts,
    build_adapter,
    check_layers,
    check_length,
    check_lora,
    check_targets,
    check_variant,
    variant_forward,
)
from lightning_modules.base import FLModule
from lightning_modules.lora_args import RETIRED_ARGS

HEAD = "head"


class SequenceClassifier(FLModule):
    """``source``'s frozen body with LoRA on ``targets`` (rank, alpha, dropout) and a head of
    ``num_classes`` outputs; ``dtype``, ``gradient_checkpointing``, ``adapter_variant`` and
    ``weights`` as for ``causal_lm``."""

    frozen_base = True  # flat_params: only the adapter and the head travel
    retired_args = RETIRED_ARGS  # model.args keys an algorithm's declaration replaced

    def __init__(
        self,
        vocab_size: int = 0,
        seq_len: int = 0,
        num_classes: int = 2,
        source: str = SMOLLM2,
        rank: int = 8,
        alpha: float = 16.0,
        dropout: float = 0.0,
        targets: Any = ("q_proj", "v_proj"),
        layers: Any = None,
        dtype: str = "float32",
        gradient_checkpointing: bool = False,
        adapter_variant: str | None = None,
        weights: bool = True,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        lora = check_lora(rank, alpha, dropout, targets, dtype, layers)
        self.variant = check_variant(adapter_variant)
        base = load_frozen_base(SOURCE_KEY, source, dtype, weights=weights)
        vocab = int(base.config.vocab_size)
        if vocab_size and vocab_size > vocab:
            raise ConfigError(
                SOURCE_KEY, source, f"has a vocabulary of {vocab} tokens but the data was "
                f"tokenized into {vocab_size}: tokenize with the model's own tokenizer "
                "(data.tokenizer: null, or the same source)",
            )  # fmt: skip
        if vocab_size and num_classes == vocab_size:  # a class per token: next-token data
            raise ConfigError(
                "model.name", "sequence_classifier", "classifies a row by data.label_column, "
                "and this data predicts next tokens: use causal_lm, or an hf: text column",
            )  # fmt: skip
        if num_classes < 2:
            raise ConfigError(
                "data.label_column", num_classes, "a classifier needs labels of >= 2 classes"
            )
        check_length(base, seq_len, source)
        check_targets(base, lora.targets, source)
        check_layers(base, lora.layers, source)
        self.body, self.extras = build_adapter(
            adapter_ready(shared_copy(base).base_model, lora.targets), lora, self.variant,
            int(base.config.hidden_size), gradient_checkpointing,
        )  # fmt: skip
        for name, module in self.extras.items():  # their entries: dual.mix, rank_scale.factor
            self.add_module(name, module)
        self.dual = self.extras.get("dual")  # the personal variant's per-instance scales
        self.head = torch.nn.Linear(int(base.config.hidden_size), num_classes)
        self.source, self.num_classes = source, num_classes
        self.block_names = (*adapter_blocks(self.body.named_parameters(), "body."), HEAD)

    def adapter_parts(self) -> AdapterParts:
        """Which entries of the flat vector are which adapter matrices (``adapters.py``)."""
        return adapter_parts(self, self.variant, self.extras)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """int64 tokens (B, T), -1 for padding (on the right) -> class logits (B, classes)."""
        mask = x >= 0
        with variant_forward(self.dual, x):  # the personal variant: per-instance scales
            out = self.body(input_ids=x.clamp(min=0), attention_mask=mask.long(),
                            use_cache=False)  # fmt: skip
        hidden = out.last_hidden_state
        last = (mask.sum(1) - 1).clamp(min=0)
        pooled = hidden[torch.arange(len(x), device=x.device), last]
        return self.head(pooled.to(self.head.weight.dtype))
