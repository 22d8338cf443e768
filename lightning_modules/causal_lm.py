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
adapter weights, bottom to top.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from fedsim.errors import ConfigError
from fedsim.pretrained import DTYPES, SMOLLM2, adapter_ready, load_frozen_base, shared_copy
from lightning_modules.base import FLModule
from lightning_modules.dual_adapter import add_personal_adapter
from lightning_modules.lora_residual import add_residuals

SOURCE_KEY = "model.args.source"
_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


def _check(rank: int, alpha: float, dropout: float, targets: Any, dtype: str) -> list[str]:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ConfigError("model.args.rank", rank, "the LoRA rank must be an integer >= 1")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha <= 0:
        raise ConfigError("model.args.alpha", alpha, "LoRA's alpha must be a number > 0")
    if not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ConfigError("model.args.dropout", dropout, "must be in [0, 1)")
    if isinstance(targets, str):
        targets = [targets]
    if not targets or not all(isinstance(t, str) and t for t in targets):
        raise ConfigError(
            "model.args.targets", targets, "a list of module names, e.g. [q_proj, v_proj]"
        )
    if dtype not in DTYPES:
        raise ConfigError("model.args.dtype", dtype, f"allowed: {', '.join(DTYPES)}")
    return list(targets)


def _check_targets(model: torch.nn.Module, targets: list[str], source: str) -> None:
    """ConfigError naming the targets ``model`` has no Linear module of that name for."""
    linear = {n.rsplit(".", 1)[-1] for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear)}  # fmt: skip
    missing = [t for t in targets if t not in linear]
    if missing:
        raise ConfigError(
            "model.args.targets", targets, f"{source} has no linear module named "
            f"{', '.join(missing)}; it has: {', '.join(sorted(linear))}",
        )  # fmt: skip


def check_length(base: torch.nn.Module, seq_len: int, source: str) -> None:
    """ConfigError when samples of ``seq_len`` tokens are longer than ``base`` reads."""
    limit = getattr(base.config, "max_position_embeddings", None)
    if seq_len and limit and seq_len > limit:
        raise ConfigError("data.max_length", seq_len, f"{source} reads at most {limit} tokens")


def checkpoint_activations(model: Any) -> None:
    """Recompute ``model``'s activations in backward (transformers 5 renames gradient
    checkpointing activation checkpointing; either name is taken)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is None:
        enable = model.gradient_checkpointing_enable
    enable({"use_reentrant": False})
    model.enable_input_require_grads()


class CausalLM(FLModule):
    """A pretrained causal LM (``source``) with LoRA on ``targets`` (rank, alpha, dropout);
    ``dtype`` the frozen base's, ``gradient_checkpointing`` recomputes activations in backward;
    ``residual``: a dense residual per adapted module for FedEx-LoRA (``lora_residual.py``);
    ``personal_adapter`` adds a second adapter beside the first (FedDPA: dual_adapter.py)."""

    frozen_base = True  # flat_params: only the adapter (trainable parameters) travels

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
        dtype: str = "float32",
        gradient_checkpointing: bool = False,
        residual: bool = False,
        personal_adapter: bool = False,
        lr: float = 0.005,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ):
        super().__init__(lr=lr, momentum=momentum, weight_decay=weight_decay)
        import peft

        targets = _check(rank, alpha, dropout, targets, dtype)
        base = load_frozen_base(SOURCE_KEY, source, dtype)
        vocab = int(base.config.vocab_size)
        if num_classes and num_classes != vocab:
            raise ConfigError(
                SOURCE_KEY, source, f"has a vocabulary of {vocab} tokens but the data was "
                f"tokenized into {num_classes}: tokenize with the model's own tokenizer "
                "(data.tokenizer: null, or the same source)",
            )  # fmt: skip
        check_length(base, seq_len, source)
        _check_targets(base, targets, source)
        config = peft.LoraConfig(
            r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, bias="none"
        )
        self.lm = peft.get_peft_model(adapter_ready(shared_copy(base), targets), config)
        if not isinstance(personal_adapter, bool):
            raise ConfigError("model.args.personal_adapter", personal_adapter, "true or false")
        if residual and personal_adapter:
            raise ConfigError(
                "model.args.residual", residual, "is FedEx-LoRA's and model.args.personal_adapter "
                "FedDPA's: set one of them, not both",
            )  # fmt: skip
        if residual:  # FedEx-LoRA's fold, beside the shared frozen weights (not in them)
            add_residuals(self.lm)
        self.dual = add_personal_adapter(self.lm, config, int(base.config.hidden_size)) if (
            personal_adapter) else None  # a second adapter beside the first (dual_adapter.py)
        if gradient_checkpointing:
            checkpoint_activations(self.lm)
        self.source, self.num_classes = source, vocab
        self.block_names = self._adapter_blocks()

    def _adapter_blocks(self) -> tuple[str, ...]:
        """The transformer layers (or other adapted modules) holding adapter weights, in
        order: FedPer's personal layers are the top ones."""
        found: dict[str, None] = {}
        for name, p in self.named_parameters():
            if p.requires_grad:
                layer = _LAYER.match(name)
                found[layer.group(1) if layer else name.split(".lora_")[0]] = None
        return tuple(found)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """int64 tokens (B, T), -1 for padding -> next-token logits (B, vocab, T)."""
        mask = x >= 0
        if self.dual is not None:  # the two adapters scaled per instance
            with self.dual.mixing(x):
                out = self.lm(input_ids=x.clamp(min=0), attention_mask=mask.long(), use_cache=False)
            return out.logits.float().transpose(1, 2)
        out = self.lm(input_ids=x.clamp(min=0), attention_mask=mask.long(), use_cache=False)
        return out.logits.float().transpose(1, 2)
