"""One contiguous float32 buffer per model: parameters travel and aggregate as flat vectors.

``bind_flat_parameters`` re-points every parameter (and float buffer) of a module at a view
of one flat tensor, so loading a client's model is one ``copy_`` and reading it back is one
``clone`` — no state_dict pickling, no per-tensor loops. Part of a model is a list of
[start, stop) ranges of that vector (``flat_ranges``), copied out and back with ``gather`` and
``scatter`` (algorithms keep personal parts this way; the client stages process an upload).

A module that declares ``frozen_base = True`` (an adapter on a pretrained model: ``causal_lm.py``)
travels as its trainable parameters only: the frozen weights and the buffers stay out of the
vector, so they never train, travel, aggregate, count in bytes or go into a checkpoint. Which
parameters are trainable is read when the layout is taken (when the module is built), once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ParamEntry:
    name: str
    shape: tuple[int, ...]
    offset: int
    numel: int


class ParamLayout:
    """Names, shapes and offsets of a module's float state inside its flat vector."""

    def __init__(self, entries: list[ParamEntry]):
        self.entries = entries
        self.by_name = {e.name: e for e in entries}
        self.total = sum(e.numel for e in entries)

    @classmethod
    def from_module(cls, module: nn.Module) -> ParamLayout:
        entries, offset = [], 0
        for name, tensor in _float_state(module):
            entries.append(ParamEntry(name, tuple(tensor.shape), offset, tensor.numel()))
            offset += tensor.numel()
        return cls(entries)

    def slice_of(self, name: str) -> slice:
        e = self.by_name[name]
        return slice(e.offset, e.offset + e.numel)

    def mask(self, names: list[str]) -> torch.Tensor:
        """Boolean mask over the flat vector selecting ``names``."""
        mask = torch.zeros(self.total, dtype=torch.bool)
        for name in names:
            mask[self.slice_of(name)] = True
        return mask

    def view(self, flat: torch.Tensor, name: str) -> torch.Tensor:
        """The tensor ``name`` as a view into ``flat``."""
        return flat[self.slice_of(name)].view(self.by_name[name].shape)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {e.name: self.view(flat, e.name) for e in self.entries}


def has_frozen_base(module: nn.Module) -> bool:
    """Whether ``module`` declares a frozen base: only its trainable parameters travel."""
    return bool(getattr(module, "frozen_base", False))


def state_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters in the module's flat vector, by name: all of them, or the trainable
    ones of a module with a frozen base (what client terms read and pull)."""
    params = list(module.named_parameters())
    return [(n, p) for n, p in params if p.requires_grad] if has_frozen_base(module) else params


def _float_state(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    params: list[tuple[str, torch.Tensor]] = list(state_parameters(module))
    if has_frozen_base(module):
        return params
    buffers = [(n, b) for n, b in module.named_buffers() if b.is_floating_point()]
    return params + buffers


def flatten_module(module: nn.Module) -> torch.Tensor:
    """A new flat float32 copy of the module's parameters and float buffers."""
    return torch.cat([t.detach().reshape(-1).float() for _, t in _float_state(module)])


def bind_flat_parameters(module: nn.Module) -> tuple[torch.Tensor, ParamLayout]:
    """Make every parameter/float buffer a view of one flat tensor; return it and its layout."""
    layout = ParamLayout.from_module(module)
    flat = flatten_module(module)
    modules = dict(module.named_modules())
    for name, _ in _float_state(module):
        owner_name, _, attr = name.rpartition(".")
        owner = modules[owner_name]
        view = layout.view(flat, name)
        if isinstance(getattr(owner, attr), nn.Parameter):
            getattr(owner, attr).data = view
        else:
            owner._buffers[attr] = view
    return flat, layout


Ranges = list[tuple[int, int]]


def flat_ranges(layout: ParamLayout, names: list[str]) -> Ranges:
    """The entries ``names`` as merged, sorted [start, stop) ranges of the flat vector."""
    spans = sorted((layout.slice_of(n).start, layout.slice_of(n).stop) for n in names)
    merged: Ranges = []
    for start, stop in spans:
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged


def gather(flat: torch.Tensor, ranges: Ranges | None) -> torch.Tensor:
    """The entries ``ranges`` of ``flat`` as one new vector, never a view (None: all of them)."""
    if ranges is None:
        return flat.clone()
    if not ranges:
        return flat.new_empty(0)
    return torch.cat([flat[a:b] for a, b in ranges])


def scatter(flat: torch.Tensor, ranges: Ranges | None, values: torch.Tensor) -> None:
    """Write ``values`` (as made by ``gather``) back into the entries ``ranges`` of ``flat``."""
    if ranges is None:
        flat.copy_(values)
        return
    offset = 0
    for a, b in ranges:
        flat[a:b] = values[offset : offset + b - a]
        offset += b - a
