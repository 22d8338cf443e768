"""A model's named blocks (bottom to top; the last is the output layer), for any module.

An ``FLModule`` declares them (``block_names``); a plain ``LightningModule`` gets them from
its top-level children that hold parameters or float buffers, in definition order, so a
module written as Lightning users write it works with FedPer's personal layers, cwFedAvg's
output layer, FedVG's block scores. Where what an algorithm needs cannot be derived (the
output layer is not a Linear with one row per class), the algorithm says so in one line.
"""

from __future__ import annotations

from torch import nn

from lightning_modules.flat_params import has_frozen_base


def _in_block(name: str, block: str) -> bool:
    """``name`` is ``block`` itself or inside it (``block.`` ...)."""
    return name == block or (name.startswith(block) and name[len(block)] == ".")


def _owned(module: nn.Module, block: str) -> list[str]:
    if has_frozen_base(module):
        return [n for n, p in module.named_parameters() if _in_block(n, block) and p.requires_grad]
    names = [n for n, _ in module.named_parameters() if _in_block(n, block)]
    names += [
        n for n, b in module.named_buffers() if _in_block(n, block) and b.is_floating_point()
    ]
    return names


def block_names(module: nn.Module) -> list[str]:
    """The declared ``block_names``, else the top-level children holding float state."""
    declared = getattr(module, "block_names", None)
    if declared:
        return list(declared)
    return [name for name, _ in module.named_children() if _owned(module, name)]


def block_parameters(module: nn.Module) -> dict[str, list[str]]:
    """Block -> the names of its parameters and float buffers."""
    return {b: _owned(module, b) for b in block_names(module)}


def head_parameters(module: nn.Module, num_blocks: int = 1) -> list[str]:
    """Parameter names of the top ``num_blocks`` blocks (1: the output layer)."""
    blocks = block_parameters(module)
    return [n for b in list(blocks)[-num_blocks:] for n in blocks[b]]


def output_layer(module: nn.Module) -> nn.Module | None:
    """The top block as a module (None when the blocks are not children of the module)."""
    names = block_names(module)
    return dict(module.named_children()).get(names[-1]) if names else None
