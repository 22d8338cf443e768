"""A per-module residual beside each LoRA layer: FedEx-LoRA's fold into the frozen weights,
kept off the shared base.

FedEx-LoRA (``fedsim/algorithms/fedex_lora.py``) adds the residual
``mean_i(B_i A_i) - mean(B) mean(A)`` of each round's aggregation to the frozen weight W0. The
base is shared by every module of a process (``fedsim/pretrained.shared_copy``), so instead of
writing into W0 each adapted layer gets a dense ``lora_residual`` R (out x in, zeros at first)
and computes ``W0 x + s (B A + R) x``, with s the scaling peft applies to B A (alpha / r):
R is in B A's units, so the same ``s`` scales both and the server needs no alpha.

R is a parameter marked trainable when the module is built, so it is part of the module's
flat vector (``flat_params``: a ``frozen_base`` module's vector is its trainable parameters)
and travels down with the adapter; it never gets a gradient (forward reads it detached), so no
optimizer moves it, and FedEx-LoRA leaves it out of what clients upload.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

RESIDUAL = "lora_residual"


def _add_residual(layer: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
    """Forward hook of a LoRA layer: its output plus ``s R x`` (no gradient reaches R)."""
    residual = getattr(layer, RESIDUAL).detach()
    x = args[0]
    scale = layer.scaling[layer.active_adapters[0]]
    extra = nn.functional.linear(x.to(residual.dtype), residual) * scale
    return output + extra.to(output.dtype)


def add_residuals(model: nn.Module) -> int:
    """Give every peft LoRA layer of ``model`` a zero residual (out x in) added in forward;
    the number of layers that got one."""
    count = 0
    for layer in model.modules():
        if not (hasattr(layer, "lora_A") and hasattr(layer, "scaling")):
            continue
        base = layer.get_base_layer()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"a residual needs a Linear under LoRA, not {type(base).__name__}")
        zeros = torch.zeros(base.out_features, base.in_features, device=base.weight.device)
        layer.register_parameter(RESIDUAL, nn.Parameter(zeros, requires_grad=True))
        layer.register_forward_hook(_add_residual)
        count += 1
    return count
