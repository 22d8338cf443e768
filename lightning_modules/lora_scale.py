"""One factor on every LoRA product of a model: the ``scaled`` adapter variant, with which an
algorithm sets the scale a client's adapter runs at (HetLoRA: alpha / r_i for a client of rank
r_i on a model built at r_max, whose peft scale is alpha / r_max).

Each adapted module computes ``W0 x + c s B A x`` with s peft's scaling and c the model's
``rank_scale.factor`` (1 at first: the plain adapter), an entry of the flat vector like the
adapter, so whoever writes the vector chooses it. It never trains (the forward reads it
detached, so it gets no gradient and no optimizer moves it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

SCALED = "default"  # peft's name of the adapter whose product is scaled


class RankScale(nn.Module):
    """The factor ``c`` and the hook that applies it to each LoRA B's output."""

    def __init__(self) -> None:
        super().__init__()
        self.factor = nn.Parameter(torch.ones(1))

    def scale(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        return output * self.factor.detach().to(output.dtype)


def add_rank_scale(lm: nn.Module) -> RankScale:
    """Hook every ``lora_B.default`` of peft model ``lm`` so that ``RankScale`` scales it."""
    rank_scale = RankScale()
    for name, module in lm.named_modules():
        if name.endswith(f".lora_B.{SCALED}"):
            module.register_forward_hook(rank_scale.scale)
    return rank_scale
