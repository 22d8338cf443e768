"""CausalLM: a pretrained causal language model with a LoRA adapter (peft); only the adapter
trains and travels.

The pretrained weights are loaded once per process (``fedsim/pretrained.py``) and frozen; each
module is a new module tree over those same tensors with peft's LoRA layers injected, so the
driver's template and a worker's module, in one process, hold one base between them. The
module declares ``frozen_base``: its flat vector (``flat_params.py``) is the adapter alone, so
every algorithm, the bytes, the client-state store and checkpoints see only the adapter.

Batches are next-token prediction (``fedsim/data/lm_text.py``): int64 tokens (B, T), -1 for
padding, and targets (B, T), -100 where there is none. ``forward`` gives logits (B, vocab, T),
the layout cross-entropy reads, so evaluation's loss is per token and its accuracy next-token
accuracy. The blocks (FedPer's personal layers...) are the transformer layers that hold
adapter weights, bottom to top. The adapter and the variant an algorithm asks for (a residual,
a personal adapter) are built by ``adapters.py``, as ``sequence_classifier``'s are; the model
declares its adapter's entries (``adapter_parts``).
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
    checkpoint_activations,
    variant_forward,
)
from lightning_modules.base import FLModule
from lightning_modules.lora_args import RETIRED_ARGS

__all__ = ["SOURCE_KEY", "CausalLM", "check_length", "checkpoint_activations"]


class CausalLM(FLModule):
    """A pretrained causal LM (``source``) with LoRA on ``targets`` (rank, alpha, dropout);
    ``dtype`` the frozen base's, ``gradient_checkpointing`` recomputes activations in backward.
    fedsim sets ``adapter_variant`` (what the algorithm declares: ``adapters.py``) and
    ``weights`` (False: the base's structure only, for the driver's template)."""

    frozen_base = True  # flat_params: only the adapter (trainable parameters) travels
    retired_args = RETIRED_ARGS  # model.args keys an algorithm's declaration replaced

    def __init__(
        self,
        vocab_size: int = 0,
        seq_len: int = 0,
        num_classes: int = 0,
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
        if num_classes and num_classes != vocab:
            raise ConfigError(
                SOURCE_KEY, source, f"has a vocabulary of {vocab} tokens but the data was "
                f"tokenized into {num_classes}: tokenize with the model's own tokenizer "
                "(data.tokenizer: null, or the same source)",
            )  # fmt: skip
        check_length(base, seq_len, source)
        check_targets(base, lora.targets, source)
        check_layers(base, lora.layers, source)
        self.lm, self.extras = build_adapter(
            adapter_ready(shared_copy(base), lora.targets), lora, self.variant,
            int(base.config.hidden_size), gradient_checkpointing,
        )  # fmt: skip
        for name, module in self.extras.items():  # their entries: dual.mix, rank_scale.factor
            self.add_module(name, module)
        self.dual = self.extras.get("dual")  # the personal variant's per-instance scales
        self.source, self.num_classes = source, vocab
        self.block_names = tuple(adapter_blocks(self.named_parameters()))

    def adapter_parts(self) -> AdapterParts:
        """Which entries of the flat vector are which adapter matrices (``adapters.py``)."""
        return adapter_parts(self, self.variant, self.extras)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """int64 tokens (B, T), -1 for padding -> next-token logits (B, vocab, T)."""
        mask = x >= 0
        with variant_forward(self.dual, x):  # the personal variant: per-instance scales
            out = self.lm(input_ids=x.clamp(min=0), attention_mask=mask.long(), use_cache=False)
        return out.logits.float().transpose(1, 2)
