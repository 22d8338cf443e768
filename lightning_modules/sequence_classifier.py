"""SequenceClassifier: a pretrained language model's body with a LoRA adapter (peft) and a
classification head; the adapter and the head train and travel, the base stays frozen.

The body is the frozen causal LM of ``model.args.source`` (loaded once per process by
``fedsim/pretrained.py``, shared with every other module built on it) without its language
modelling head. A sequence is represented by the hidden state of its last real token (the
tokens are padded on the right, -1; ``fedsim/data/hf_text.py``), as transformers' own
``*ForSequenceClassification`` models do, and a ``Linear`` head maps it to the classes of
``data.label_column``. The flat vector (``frozen_base``) is the adapter, then the head; the
blocks are the transformer layers that hold adapter weights, bottom to top, then the head,
so FedPer's top block and FedRep's head are the classifier.
"""

from __future__ import annotations

from typing import Any

import torch

from fedsim.errors import ConfigError
from fedsim.pretrained import SMOLLM2, adapter_ready, load_frozen_base, shared_copy
from lightning_modules.base import FLModule
from lightning_modules.causal_lm import (
    _LAYER,
    SOURCE_KEY,
    _check,
    _check_targets,
    check_length,
    checkpoint_activations,
)

HEAD = "head"


class SequenceClassifier(FLModule):
    """``source``'s frozen body with LoRA on ``targets`` (rank, alpha, dropout) and a head of
    ``num_classes`` outputs; ``dtype``, ``gradient_checkpointing`` as for ``causal_lm``."""

    frozen_base = True  # flat_params: only the adapter and the head travel

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
        dtype: str = "float32",
        gradient_checkpointing: bool = False,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        import peft

        targets = _check(rank, alpha, dropout, targets, dtype)
        base = load_frozen_base(SOURCE_KEY, source, dtype)
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
        _check_targets(base, targets, source)
        config = peft.LoraConfig(
            r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none"
        )
        body = adapter_ready(shared_copy(base).base_model, targets)
        self.body = peft.get_peft_model(body, config)
        if gradient_checkpointing:
            checkpoint_activations(self.body)
        self.head = torch.nn.Linear(int(base.config.hidden_size), num_classes)
        self.source, self.num_classes = source, num_classes
        self.block_names = self._blocks()

    def _blocks(self) -> tuple[str, ...]:
        """The layers holding adapter weights, bottom to top, then the head."""
        found: dict[str, None] = {}
        for name, p in self.body.named_parameters():
            if p.requires_grad:
                layer = _LAYER.match(name)
                found[f"body.{layer.group(1) if layer else name.split('.lora_')[0]}"] = None
        return (*found, HEAD)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """int64 tokens (B, T), -1 for padding (on the right) -> class logits (B, classes)."""
        mask = x >= 0
        out = self.body(input_ids=x.clamp(min=0), attention_mask=mask.long(), use_cache=False)
        hidden = out.last_hidden_state
        last = (mask.sum(1) - 1).clamp(min=0)
        pooled = hidden[torch.arange(len(x), device=x.device), last]
        return self.head(pooled.to(self.head.weight.dtype))
