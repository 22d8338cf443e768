"""Tensors on the wire as numpy buffers: no pickled torch storages between processes.

``to_wire`` replaces every CPU tensor inside dicts, lists, tuples and dataclasses by a small
carrier whose pickle is one numpy array. Pickle protocol 5 (Ray's object store, or a spill
file) moves that array as a raw buffer, and unpickling rebuilds a tensor on the other side:
a zero-copy, read-only view (``copy=False``: data sent to workers, which only read it) or an
owned copy (``copy=True``: results that the driver keeps).
"""

from __future__ import annotations

import copy as copy_module
import dataclasses
import warnings
from typing import Any

import numpy as np
import torch


def tensor_view(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``array``'s memory (read-only arrays stay read-only by contract)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        return torch.from_numpy(array)


def tensor_copy(array: np.ndarray) -> torch.Tensor:
    """A tensor owning a copy of ``array``."""
    return torch.from_numpy(np.array(array, copy=True))


class WireTensor:
    """Carrier of one tensor as a numpy array; unpickles straight into a torch.Tensor."""

    __slots__ = ("array", "copy")

    def __init__(self, array: np.ndarray, copy: bool):
        self.array, self.copy = array, copy

    def __reduce__(self) -> tuple[Any, tuple[np.ndarray]]:
        return (tensor_copy if self.copy else tensor_view), (self.array,)


def _tensor_to_wire(tensor: torch.Tensor, copy: bool) -> Any:
    if tensor.device.type != "cpu" or tensor.is_sparse or tensor.dtype == torch.bfloat16:
        return tensor  # rare: let torch pickle it
    return WireTensor(tensor.detach().numpy(), copy)


def to_wire(obj: Any, *, copy: bool = False) -> Any:
    """``obj`` with every CPU tensor replaced by a ``WireTensor``; other values are shared.

    Containers are rebuilt only where something inside them changed; dataclass instances
    (frozen or not) are shallow-copied, never mutated.
    """
    if isinstance(obj, torch.Tensor):
        return _tensor_to_wire(obj, copy)
    if isinstance(obj, dict):
        out = {key: to_wire(value, copy=copy) for key, value in obj.items()}
        return out if any(out[k] is not obj[k] for k in obj) else obj
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        items = [to_wire(value, copy=copy) for value in obj]
        if all(new is old for new, old in zip(items, obj, strict=True)):
            return obj
        return items if isinstance(obj, list) else tuple(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            new = to_wire(value, copy=copy)
            if new is not value:
                changed[f.name] = new
        if not changed:
            return obj
        clone = copy_module.copy(obj)
        for name, value in changed.items():
            object.__setattr__(clone, name, value)
        return clone
    return obj
